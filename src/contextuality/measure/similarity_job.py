"""The similarity stage's jobs: the common rows, each model's sample, the within-model and the pair tables.

Each job checks what it reads against what made it: the samples against ``rows.parquet``'s digest (the same
occurrences for every model), the store's layer files against their manifest (``LayerReader``), the device
parts against each other; tables and the k-NN file are written under a temporary name, then renamed, and the
same inputs and seed give the same bytes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from contextuality.core.digest import sha256_of
from contextuality.measure.similarity import join as joined
from contextuality.measure.similarity.sample import (
    SampleWriter,
    gather_from_store,
    sample_dtype,
    write_sample,
)
from contextuality.store.files import StoreError

LOG = logging.getLogger(__name__)


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
    # every common row (max_rows: null): unchunked datasets the table jobs map instead of holding them
    writer = SampleWriter(out, contiguous=max_rows is None)
    for layer, path in enumerate(tqdm(layer_paths, desc=f"{model} similarity sample", unit="layer", mininterval=5)):
        with LayerReader(path, manifest) as reader:
            rows = gather_from_store(reader, first, pieces, pooling, dtype)
        _check_finite(rows, path, model, layer)
        writer.add(layer, rows)
    writer.finish(
        sample_attrs(model, manifest["n_layers"], rows_path, manifest["provenance_sha256"], pooling, len(first))
    )


def run_similarity_sample_from_parts(*, model: str, rows_path: Path, part_paths: list[Path], out: Path) -> None:
    """A model's sample joined from its device parts (each holds its consecutive layers), checked to be of the
    same rows, provenance and pooling."""
    import h5py

    from contextuality.store.files import open_complete, read_checked

    expected = sha256_of(rows_path)
    layers, attrs = {}, None  # the parts' layers are held whole: the device path refuses max_rows: null
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
