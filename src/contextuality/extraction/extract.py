"""Run a shard of sentences through a model and store every layer's vector of every planned unit.

The plan (``contextuality.extraction.plan``, rule ``plan``) says what each sentence feeds the model and
which token range each stored unit pools. Extraction only runs the model and keeps those rows:

* The model's forward passes (its encoder's, ``contextuality.extraction.encoders``) run in windows of
  length-sorted batches, and the rows to store are selected and cast on the device
  (``contextuality.extraction.windows``); each window's rows come here in corpus order.
* HDF5 writes happen in a background thread (``contextuality.extraction.writer``) while the next batches run,
  each window's rows checked finite first (``finite``).

Special tokens go through the model but are never stored. Layer 0 is the input-embedding layer.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from contextuality.core import diskspace
from contextuality.core.atomic import atomic_path
from contextuality.core.layout import corpus_label
from contextuality.core.runtime import tell_terminal
from contextuality.core.settings import WINDOW_BATCHES, ShardSettings, shard_bounds, stored_params
from contextuality.extraction.alignment import Plan
from contextuality.extraction.devices import LEASE_DIR, choose_device, describe
from contextuality.extraction.encoders import Encoder, encoder_for, load_encoder
from contextuality.extraction.finite import finite_check
from contextuality.extraction.heap import keep_freed_memory
from contextuality.extraction.plan import read_plan
from contextuality.extraction.windows import ExtractionError
from contextuality.extraction.writer import ShardWriter, chunk_cache_bytes
from contextuality.store.files import create_checked

log = logging.getLogger(__name__)

WRITER_DEPTH = 4  # windows queued for the writer before the forward passes wait


def estimate_bytes(n_units: int, n_layers: int, dim: int, storage_dtype: str) -> int:
    return n_units * n_layers * dim * np.dtype(storage_dtype).itemsize


def extract_shard(
    loaded,
    plan: Plan,
    out_h5: Path,
    *,
    pooling: str,
    batch_size: int,
    storage_dtype: str,
    device: str,
    disk_factor: float,
    attrs: dict,
    forward=None,
    max_batch_tokens: int | None = None,
) -> dict:
    """Extract the plan's sentences into ``out_h5`` (one dataset per layer, rows in plan order) with the passes of
    ``loaded`` (an encoder, or a loaded Hugging Face model: ``encoders.encoder_for``); a forward pass takes at most
    ``batch_size`` sentences and ``max_batch_tokens`` padded tokens (None: no cap)."""
    encoder = encoder_for(loaded)
    n_units, dim = len(plan.units), encoder.width
    needed = estimate_bytes(n_units, encoder.n_layers, dim, storage_dtype)
    _log_shard(encoder, plan, needed, dim, storage_dtype)
    windows = encoder.windows(plan, batch_size=batch_size, max_batch_tokens=max_batch_tokens, pooling=pooling,
                              device=device, storage_dtype=storage_dtype, forward=forward)  # fmt: skip
    started = time.perf_counter()
    bar = tqdm(total=len(plan.sentence_ids), unit="sent", mininterval=5, desc=f"extract {encoder.key}")
    cache = chunk_cache_bytes(n_units, dim, storage_dtype)
    with (
        diskspace.reserve(out_h5, needed, disk_factor, ways=diskspace.ways_out(storage_dtype)),
        atomic_path(out_h5) as tmp,
        h5py.File(tmp, "w", rdcc_nbytes=cache, rdcc_nslots=1009) as out,
    ):
        check = finite_check(plan, out_h5, encoder.key, attrs.get("shard", 0), storage_dtype)
        writer = ShardWriter(
            out, out_h5, encoder.n_layers, n_units, dim, storage_dtype, depth=WRITER_DEPTH, check=check
        )
        try:
            _write_windows(windows, writer, plan, out_h5, bar, started)
        finally:
            writer.close()
        bar.close()
        create_checked(out, "sentence_offsets", plan.unit_offsets.shape, np.int64, data=plan.unit_offsets)
        create_checked(out, "sentence_ids", plan.sentence_ids.shape, np.int64, data=plan.sentence_ids)
        out.attrs.update(attrs)
        out.attrs.update(_shard_attrs(encoder, plan, dim, storage_dtype, pooling))
    elapsed = time.perf_counter() - started
    stats = {
        "sentences": len(plan.sentence_ids),
        "tokens": plan.n_tokens,
        "units": n_units,
        "seconds": elapsed,
        "tokens_per_s": plan.n_tokens / elapsed if elapsed else float("nan"),
        "truncated": int(plan.truncated.sum()),
        "skipped": int(plan.skipped.sum()),
    }
    log.info("done: %s", json.dumps(stats))
    return stats


def _log_shard(encoder: Encoder, plan: Plan, needed: int, dim: int, storage_dtype: str) -> None:
    """The shard's size and output in the log, and its over-long sentences."""
    log.info(
        "shard: %d sentences, %d model tokens, %d stored units; output %.1f MB (%d layers x %d dims, %s)",
        len(plan.sentence_ids),
        plan.n_tokens,
        len(plan.units),
        needed / 1e6,
        encoder.n_layers,
        dim,
        storage_dtype,
    )
    log.info(
        "over-long sentences (max %d tokens): %d truncated, %d skipped",
        encoder.max_length,
        int(plan.truncated.sum()),
        int(plan.skipped.sum()),
    )


def _write_windows(windows, writer: ShardWriter, plan: Plan, out_h5: Path, bar, started: float) -> None:
    """Every window's rows to ``writer``, in corpus order (a window starting elsewhere is an error), the progress
    bar following the windows' sentences and the tokens per second since ``started``."""
    expected, done = 0, 0
    for base, block, window_end in windows:
        if base != expected:
            raise ExtractionError(f"{out_h5}: a window starts at row {base}, expected {expected}")
        writer.put(block)
        expected += _rows(block)
        bar.update(window_end - done)
        done = window_end
        bar.set_postfix(tokens_per_s=f"{plan.token_offsets[done] / max(time.perf_counter() - started, 1e-9):.0f}")


def _shard_attrs(encoder: Encoder, plan: Plan, dim: int, storage_dtype: str, pooling: str) -> dict:
    """What the shard file records of its rows, beside the job's attributes: shape, dtype, pooling, losses."""
    return {
        "n_layers": encoder.n_layers,
        "dim": dim,
        "dtype": storage_dtype,
        "pooling": pooling,
        "max_length": encoder.max_length,
        "n_truncated_sentences": int(plan.truncated.sum()),
        "n_skipped_sentences": int(plan.skipped.sum()),
        "first_row": plan.first_row,
        "complete": 1,
    }


def _rows(block) -> int:
    return block.shape[1]


# --------------------------------------------------------------------------------------------------
# The workflow's jobs


def package_versions() -> dict:
    import importlib.metadata

    names = ["torch", "transformers", "tokenizers", "h5py", "numpy", "spacy", "contextuality"]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_extraction_job(
    *,
    model_key: str,
    corpus: str,
    settings: ShardSettings,
    record_path: Path,
    model_dir: Path,
    tokens_path: Path,
    units_path: Path,
    shard: int,
    out_h5: Path,
    threads: int,
    disk_factor: float,
    gpus: int,
    seed: int,
) -> dict:
    """Everything one shard job does: pick device, load the model, extract the shard's planned sentences.

    ``seed`` is recorded for provenance only (extraction draws nothing); ``disk_factor`` is
    ``extraction.min_free_disk_factor``. Neither changes the stored vectors.
    """
    import pyarrow.parquet as pq
    import torch

    from contextuality.store import provenance

    keep_freed_memory()  # no page faults anew in every forward pass (extraction.heap)
    torch.set_num_threads(max(1, threads))
    record = json.loads(record_path.read_text())
    n_sentences = pq.ParquetFile(tokens_path).metadata.num_rows
    first, last = shard_bounds(n_sentences, settings.n_shards, shard, WINDOW_BATCHES * settings.batch_size)
    plan = read_plan(tokens_path, units_path, first, last)
    device, lease = choose_device(settings.device, gpus, shard, LEASE_DIR, compute_dtype=settings.compute_dtype)
    tell_terminal(f"{model_key}, {corpus_label(corpus)}: shard {shard} of {settings.n_shards} (sentences {first}-"
                  f"{last - 1}) extracted on {describe(device)}")  # fmt: skip
    encoder = load_encoder(model_key, settings, record, model_dir, device)
    attrs = {
        "model": model_key,
        "source": record["source"],
        "revision": record.get("revision") or record.get("version") or record.get("weights_sha256", ""),
        "weights_sha256": record.get("weights_sha256", ""),
        "shard": shard,
        "seed": seed,
        "n_shards": settings.n_shards,
        "device": device,
        "compute_dtype": settings.compute_dtype,
        "tokenizer": encoder.tokenizer_name,
        "indexing": settings.indexing,
        "tokenization": settings.tokenization,
        # the last hidden state of a pre-norm decoder has passed its final norm; the others have not
        "final_norm": encoder.final_norm,
        "versions": json.dumps(package_versions(), sort_keys=True),
        # what every shard of the model must share, checked by the manifest and every reader
        "provenance": provenance.encode(
            provenance.shard_provenance(model_key, stored_params(settings), record_path, tokens_path, units_path)
        ),
    }
    try:
        return extract_shard(
            encoder,
            plan,
            out_h5,
            pooling=settings.pooling,
            batch_size=settings.batch_size,
            max_batch_tokens=settings.max_batch_tokens,
            storage_dtype=settings.storage_dtype,
            device=device,
            disk_factor=disk_factor,
            attrs=attrs,
        )
    finally:
        if lease is not None:
            lease.close()
