"""The similarity stage's jobs: the common rows, each model's sample, the within-model and the pair tables.

Each job checks what it reads against what made it: the samples against ``rows.parquet``'s digest (the same
occurrences for every model), the store's layer files against their manifest (``LayerReader``), the device
parts against each other; tables and the k-NN file are written under a temporary name, then renamed, and the
same inputs and seed give the same bytes.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from contextuality.core.atomic import atomic_path
from contextuality.core.digest import sha256_of
from contextuality.core.settings import SimilaritySettings
from contextuality.measure import similarity_join as joined
from contextuality.measure import similarity_tables as tables
from contextuality.measure.similarity_sample import (
    gather_from_store,
    read_sample,
    sample_dtype,
    write_sample,
)
from contextuality.store.files import StoreError, layer_name

LOG = logging.getLogger(__name__)
_LEASES = []  # a GPU lease is held for the job's life (the kernel frees it when the process ends)


def table_device(gpus: int, threads: int, log: logging.Logger = LOG) -> str:
    """Where a table job computes: numpy on the host, with ``threads`` BLAS threads; on the job's GPU when its
    rule was given one (the device measurement's policy, ``metrics.device``)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=max(1, threads))
    if gpus < 1:
        return "cpu"
    from contextuality.extraction.devices import choose_device

    device, lease = choose_device("cuda", gpus, 0, Path("resources") / ".gpu-leases", setting="metrics.device",
                                  job="similarity job", rule="similarity_model")  # fmt: skip
    _LEASES.append(lease)
    log.info("similarity tables on %s", device)
    return device


def run_similarity_rows(
    word_index: Path, units: dict[str, Path], tokens: dict[str, Path], seed: int, out_rows: Path, out_record: Path
) -> dict:
    """rows.parquet and rows.json of a corpus: its indexed occurrences every model stores."""
    stored = {model: joined.model_words(pd.read_parquet(path), model, path) for model, path in sorted(units.items())}
    flags = {
        model: pd.read_parquet(path, columns=["sentence_id", "truncated", "skipped"]) for model, path in tokens.items()
    }
    rows, record = joined.common_rows(pd.read_parquet(word_index), stored, flags, seed)
    if len(rows) < 4:
        raise StoreError(
            f"{out_rows}: the models store only {len(rows)} common indexed occurrences of {record['n_words']}; the "
            "similarity stage needs at least 4: use a larger corpus, or set similarity.enabled: false"
        )
    joined.write_rows(rows, record, out_rows, out_record)
    LOG.info("%d of %d indexed occurrences stored by every model; lost: %s", len(rows), record["n_words"],
             json.dumps(record["lost"]))  # fmt: skip
    return record


def sample_attrs(model: str, n_layers: int, rows_path: Path, provenance_sha256: str, pooling: str, n_rows: int) -> dict:
    return {"model": model, "n_layers": n_layers, "rows_sha256": sha256_of(rows_path),
            "provenance_sha256": provenance_sha256, "pooling": pooling, "n_rows": n_rows}  # fmt: skip


def run_similarity_sample_from_store(
    *, model: str, rows_path: Path, manifest_path: Path, layer_paths: list[Path], pooling: str,
    max_rows: int | None, out: Path,
) -> None:  # fmt: skip
    """A model's sample gathered from the store: each layer file read once (checked against the manifest)."""
    from contextuality.store.reader import LayerReader, read_manifest

    manifest = read_manifest(manifest_path)
    rows = joined.read_rows(rows_path, [model])
    first, pieces = joined.sample_rows(rows, model, joined.sample_size(len(rows), max_rows))
    if len(layer_paths) != manifest["n_layers"]:
        raise StoreError(
            f"{manifest_path}: lists {manifest['n_layers']} layers, but the job was given {len(layer_paths)}"
        )
    if len(first) and int((first + pieces).max()) > manifest["rows"]:
        raise StoreError(f"{rows_path}: names rows beyond the {manifest['rows']} of {manifest_path} (made from another "
                         "plan); delete it and rerun snakemake")  # fmt: skip
    dtype = sample_dtype(pieces, manifest["dtype"])
    layers = {}
    for layer, path in enumerate(tqdm(layer_paths, desc=f"{model} similarity sample", unit="layer", mininterval=5)):
        with LayerReader(path, manifest) as reader:
            layers[layer] = gather_from_store(reader, first, pieces, pooling, dtype)
        _check_finite(layers[layer], path, model, layer)
    attrs = sample_attrs(model, manifest["n_layers"], rows_path, manifest["provenance_sha256"], pooling, len(first))
    write_sample(out, layers, attrs)


def run_similarity_sample_from_parts(*, model: str, rows_path: Path, part_paths: list[Path], out: Path) -> None:
    """A model's sample joined from its device parts (each holds its consecutive layers), checked to be of the
    same rows, provenance and pooling."""
    import h5py

    from contextuality.store.files import open_complete, read_checked

    expected = sha256_of(rows_path)
    layers, attrs = {}, None
    for path in part_paths:
        with open_complete(path) as handle:
            found = {key: (value.item() if hasattr(value, "item") else value) for key, value in handle.attrs.items()}
            for key in ("model", "rows_sha256", "provenance_sha256", "pooling", "n_rows", "n_layers"):
                if attrs is not None and found.get(key) != attrs.get(key):
                    raise StoreError(f"{path}: records {key} {found.get(key)!r}, but {part_paths[0]} records "
                                     f"{attrs.get(key)!r}; delete the parts and rerun snakemake")  # fmt: skip
            attrs = attrs or found
            if found.get("rows_sha256") != expected or found.get("model") != model:
                raise StoreError(f"{path}: gathered for model {found.get('model')!r} from other rows than {rows_path}; "
                                 "delete it and rerun snakemake")  # fmt: skip
            for name in handle:
                if isinstance(handle[name], h5py.Dataset) and name.startswith("layer_"):
                    layers[int(name.removeprefix("layer_"))] = read_checked(handle[name], Path(path))
    if attrs is None or sorted(layers) != list(range(int(attrs["n_layers"]))):
        raise StoreError(f"{out}: the device parts {', '.join(map(str, part_paths))} hold layers {sorted(layers)}, not "
                         f"every layer of {model}; delete them and rerun snakemake")  # fmt: skip
    write_sample(out, layers, {key: attrs[key] for key in ("model", "n_layers", "rows_sha256", "provenance_sha256",
                                                            "pooling", "n_rows")})  # fmt: skip


def _check_finite(rows: np.ndarray, path: Path, model: str, layer: int) -> None:
    bad = ~np.isfinite(rows).all(axis=1)
    if bad.any():
        raise StoreError(f"{path}: model {model} layer {layer}'s sample row {int(np.flatnonzero(bad)[0])} is not finite "
                         "(a pooled word overflowed, or the store is damaged); delete it and rerun snakemake")  # fmt: skip


def load_sample(sample_path: Path, rows_path: Path, model: str, max_rows: int | None, device: str = "cpu"):
    """A model's checked sample: every layer (on ``device``: numpy for the CPU, torch tensors on a GPU) and its
    attributes."""
    n_rows = joined.sample_size(len(pd.read_parquet(rows_path, columns=["draw"])), max_rows)
    layers, attrs = read_sample(sample_path, model=model, rows_digest=sha256_of(rows_path), n_rows=n_rows)
    if str(device).startswith("cuda"):
        import torch

        layers = [torch.as_tensor(layer, device=device) for layer in layers]
    return layers, attrs


def run_similarity_model(
    *, corpus: str, model: str, sample_path: Path, rows_path: Path, settings: SimilaritySettings, seed: int,
    memory_mb: int, out_csv: Path, out_knn: Path, device: str = "cpu",
) -> pd.DataFrame:  # fmt: skip
    """A model's within table (every pair of its layers, every variant) and its k-NN file."""
    layers, attrs = load_sample(sample_path, rows_path, model, settings.max_rows, device)
    parts, neighbours = [], {}
    for variant in tqdm(settings.variants, desc=f"{model} within", unit="variant"):
        keep = tables.keep_mask(variant, layers, None)
        knn = tables.knn_of_layers(layers, variant, keep, settings)
        if knn is not None and variant != "no_massive":  # no_massive's rows depend on the pair: not kept
            neighbours |= {f"{variant}_{layer_name(layer)}": indices for layer, indices in enumerate(knn)}
        parts.append(tables.variant_rows(layers, None, variant=variant, settings=settings, seed=seed,
                                         memory_mb=memory_mb, knn_a=knn, knn_b=knn, keep=keep))  # fmt: skip
    table = tables.finish_table(parts, corpus=corpus, model_a=model, n_a=len(layers), model_b=model, n_b=len(layers))
    write_table(table, out_csv)
    write_knn(out_knn, neighbours, {"model": model, "rows_sha256": attrs["rows_sha256"], "knn_k": settings.knn_k})
    return table


def run_similarity_pair(
    *, corpus: str, models: tuple[str, str], samples: tuple[Path, Path], knn: tuple[Path, Path], rows_path: Path,
    settings: SimilaritySettings, seed: int, memory_mb: int, out_csv: Path, device: str = "cpu",
) -> pd.DataFrame:  # fmt: skip
    """The cross table of two models (every layer of A against every layer of B, every variant)."""
    (model_a, model_b), loaded = models, []
    for model, sample, knn_path in zip(models, samples, knn):
        layers, attrs = load_sample(sample, rows_path, model, settings.max_rows, device)
        loaded.append((layers, read_knn(knn_path, model=model, rows_digest=attrs["rows_sha256"], k=settings.knn_k)))
    (layers_a, knn_a), (layers_b, knn_b) = loaded
    parts = []
    for variant in tqdm(settings.variants, desc=f"{model_a} x {model_b}", unit="variant"):
        keep = tables.keep_mask(variant, layers_a, layers_b)
        if variant == "no_massive":
            neighbours_a = tables.knn_of_layers(layers_a, variant, keep, settings)
            neighbours_b = tables.knn_of_layers(layers_b, variant, keep, settings)
        else:
            neighbours_a, neighbours_b = (
                _stored_knn(knn_a, variant, len(layers_a)),
                _stored_knn(knn_b, variant, len(layers_b)),
            )
        parts.append(tables.variant_rows(layers_a, layers_b, variant=variant, settings=settings, seed=seed,
                                         memory_mb=memory_mb, knn_a=neighbours_a, knn_b=neighbours_b, keep=keep))  # fmt: skip
    table = tables.finish_table(parts, corpus=corpus, model_a=model_a, n_a=len(layers_a), model_b=model_b,
                                n_b=len(layers_b))  # fmt: skip
    write_table(table, out_csv)
    return table


def _stored_knn(knn: dict, variant: str, n_layers: int) -> list[np.ndarray] | None:
    names = [f"{variant}_{layer_name(layer)}" for layer in range(n_layers)]
    return [knn[name] for name in names] if all(name in knn for name in names) else None


def write_table(table: pd.DataFrame, path: Path) -> None:
    """A table as CSV (every float with 17 significant digits: the same values give the same bytes)."""
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.17g")


def read_table(path: str | Path) -> pd.DataFrame:
    """A similarity table, checked: its columns are ``TABLE_COLUMNS`` and every value is in its range (CKA in
    [0, 1] biased, at most 1 debiased; angle in [0, π/2]; mutual k-NN in [0, 1])."""
    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=["", "NaN", "nan"])
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: not a readable table ({err}); delete it and rerun snakemake") from None
    if list(table.columns) != tables.TABLE_COLUMNS:
        raise StoreError(f"{path}: its columns are not the similarity table's ({', '.join(tables.TABLE_COLUMNS)}); "
                         "delete it and rerun snakemake")  # fmt: skip
    ranges = {"cka_biased": (-1e-9, 1 + 1e-9), "cka_debiased": (-np.inf, 1 + 1e-9),
              "procrustes_angle": (0, np.pi / 2 + 1e-9), "mutual_knn": (0, 1), "p_perm": (0, 1)}  # fmt: skip
    for column, (low, high) in ranges.items():
        values = table[column].to_numpy(float)
        bad = np.flatnonzero(~np.isnan(values) & ((values < low) | (values > high)))
        if len(bad):
            raise StoreError(f"{path}:{bad[0] + 2}: {column} {values[bad[0]]} is outside [{low:g}, {high:g}]; delete "
                             "the table and rerun snakemake")  # fmt: skip
    return table


def write_knn(path: Path, neighbours: dict[str, np.ndarray], attrs: dict) -> None:
    """knn.npz: each (variant, layer)'s neighbour indices and the attributes (as ``attrs.json``), written with
    fixed member times (the same neighbours give the same bytes; ``numpy.savez`` stamps the current time)."""
    members = {f"{name}.npy": array for name, array in sorted(neighbours.items())}
    members["attrs.npy"] = np.array(json.dumps(attrs, sort_keys=True))
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w") as archive:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.save(buffer, array, allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())


def read_knn(path: Path, *, model: str, rows_digest: str, k: int) -> dict[str, np.ndarray]:
    """A model's k-NN file, checked to be that model's, of these rows and this k."""
    with np.load(path, allow_pickle=False) as archive:
        attrs = json.loads(str(archive["attrs"]))
        if (attrs.get("model"), attrs.get("rows_sha256"), attrs.get("knn_k")) != (model, rows_digest, k):
            raise StoreError(f"{path}: holds the neighbours of model {attrs.get('model')!r} for other rows or another k "
                             f"than this run's ({model}, k = {k}); delete it and rerun snakemake")  # fmt: skip
        return {name: archive[name] for name in archive.files if name != "attrs"}
