"""The similarity stage's table jobs: a model's layers against each other (``similarity_model``) and two
models' layers against each other (``similarity_pair``), on the job's device.

Each sample is checked against ``rows.parquet`` (the same occurrences for every model) before it is measured,
the k-NN file against its model, rows and k; the tables and the k-NN file are written under a temporary name,
then renamed, and the same inputs and seed give the same bytes.
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
from contextuality.measure.similarity import join as joined
from contextuality.measure.similarity import tables
from contextuality.measure.similarity.sample import read_sample
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
    memory_mb = engine_budget_mb(memory_mb, layers)
    parts, neighbours = [], {}
    for variant in tqdm(settings.variants, desc=f"{model} within", unit="variant"):
        keep = tables.keep_mask(variant, layers, None)
        knn = tables.knn_of_layers(layers, variant, keep, settings)
        if knn is not None and variant != "no_massive":  # no_massive's rows depend on the pair: not kept
            neighbours |= {f"{variant}_{layer_name(layer)}": indices for layer, indices in enumerate(knn)}
        parts.append(tables.variant_rows(layers, None, variant=variant, settings=settings, seed=seed,
                                         memory_mb=memory_mb, knn_a=knn, knn_b=knn, keep=keep))  # fmt: skip
    table = tables.finish_table(parts, corpus=corpus, model_a=model, n_a=len(layers), model_b=model, n_b=len(layers))
    tables.write_table(table, out_csv)
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
    memory_mb = engine_budget_mb(memory_mb, [*layers_a, *layers_b])
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
    tables.write_table(table, out_csv)
    return table


# What a table job keeps for itself beside the samples and the engine's work (the interpreter, the tables)
JOB_BASE_MB = 256


def engine_budget_mb(memory_mb: int, layers: list) -> int:
    """The engine's share of the job's budget ``metrics.memory_mb``: what the samples it holds leave (at least
    JOB_BASE_MB): the job's peak stays near the budget however large the samples."""
    held = sum(0 if isinstance(layer, np.memmap)  # a mapped sample of every row: paged in, never held
               else int(layer.nbytes) if hasattr(layer, "nbytes") else layer.numel() * layer.element_size()
               for layer in layers)  # fmt: skip
    return max(JOB_BASE_MB, int(memory_mb - held / 2**20 - JOB_BASE_MB))


def _stored_knn(knn: dict, variant: str, n_layers: int) -> list[np.ndarray] | None:
    names = [f"{variant}_{layer_name(layer)}" for layer in range(n_layers)]
    return [knn[name] for name in names] if all(name in knn for name in names) else None


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
