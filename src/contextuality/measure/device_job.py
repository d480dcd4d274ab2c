"""Every layer measured where the forward passes leave it: the device job (rule ``measure_model``).

The job runs the plan's forward passes itself, exactly as extraction runs them (the model's
``extraction.encoders.Encoder.windows``: the same windows, batches, pooling and cast to ``extraction.storage_dtype``,
on the device), keeps the rows
of a **group of layers** resident on the device for one pass over the corpus, and measures each layer of
the group there with the one measurement path (``layer_job.measure_rows`` on torch's arrays), so no vector
goes to a disk. A model whose layers do not all fit is measured in groups (``plan_groups``), sized at run
time from the device's free memory and ``metrics.device_memory_fraction`` (on torch's CPU backend, from the
memory the job was given, its ``mem_mb``: ``device_plan``); a group's pass stops after its
deepest layer (``extraction.windows.stop_after``). The per-layer files are those ``measure_layer`` writes, packed into one tar
per part (the layer count is known only once the model is built), beside a record of what the rows were
made from (``DEVICE_RECORD``: the manifest's provenance, rows, dims and layers). docs/scaling.md gives
the memory and pass arithmetic.

Reproducible: every seeded draw is made on the host from the plan (``measure_rows``), the device's
reductions are deterministic (``torch.use_deterministic_algorithms``), and the groups change no bytes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality.core import layout
from contextuality.core.archive import pack
from contextuality.core.atomic import atomic_path
from contextuality.core.layout import corpus_label
from contextuality.core.runtime import tell_terminal
from contextuality.core.settings import WINDOW_BATCHES, MeasureSettings, ShardSettings, stored_params
from contextuality.extraction.devices import describe, job_device
from contextuality.extraction.encoders import Encoder, encoder_for, load_encoder
from contextuality.extraction.plan import read_plan
from contextuality.measure.device.parts import Resume, device_record, part_layers, resume_key, rows_provenance
from contextuality.measure.device.plan import (
    GPU_BLOCK_ROWS,
    MB,
    GroupPlan,
    free_device_bytes,
    held_bytes,
    plan_groups,
    reserve_bytes,
    usable_fraction,
)
from contextuality.measure.engine import backend
from contextuality.measure.engine.layer_pass import BLOCK_ROWS
from contextuality.measure.engine.layer_rows import OccurrenceIndex, RowsInMemory
from contextuality.measure.engine.streaming import BASE_MB
from contextuality.measure.layer_job import measure_rows_then, read_units
from contextuality.measure.layer_result import write_layer_results
from contextuality.measure.similarity.sample import SampleRequest
from contextuality.store import provenance as provenance_module
from contextuality.store.provenance import shard_provenance

LOG = logging.getLogger(__name__)

# How the device job's errors end: the rows came from this job's own forward passes.
NON_FINITE_REMEDY = (
    "the model produced them in this job's forward passes: check its weights, or compute in float32 "
    "(extraction.compute_dtype: float32; half precision overflows)"
)


# --------------------------------------------------------------------------------------------------
# The job


def deterministic(device: str) -> None:
    """Deterministic reductions on the device: the same rows give the same bytes, run after run."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic workspace
    torch.use_deterministic_algorithms(True, warn_only=True)
    if str(device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def fill_group(encoder: Encoder, plan, group: list[int], resident, shard: ShardSettings, device: str,
               desc: str) -> None:  # fmt: skip
    """One pass over the corpus: the group's rows of every sentence into ``resident`` (group, rows, dim), by the
    encoder's windows kept on the device (a stateful ELMo starting each pass from the zero state, as extraction's
    one pass starts)."""
    windows = encoder.windows(plan, batch_size=shard.batch_size, max_batch_tokens=shard.max_batch_tokens,
                              pooling=shard.pooling, device=device, storage_dtype=shard.storage_dtype, layers=group,
                              to_host=False)  # fmt: skip
    n_sentences = len(plan.sentence_ids)
    with tqdm(total=n_sentences, unit="sent", mininterval=5, desc=desc) as bar:
        done = 0
        for base, block, end, release in windows:
            resident[:, base : base + block.shape[1]].copy_(block, non_blocking=True)
            release()
            bar.update(end - done)
            done = end


def batch_tokens(plan, shard: ShardSettings) -> int:
    """The most padded tokens of one forward pass over this plan: ``batch_size`` of its longest sentence, or
    ``max_batch_tokens`` (a longer sentence alone)."""
    longest = int(np.diff(plan.token_offsets).max(initial=1))
    tokens = shard.batch_size * longest
    return tokens if shard.max_batch_tokens is None else min(tokens, max(shard.max_batch_tokens, longest))


def job_reserve(plans: list, shard: ShardSettings, *, d: int, n_layers: int, on_cuda: bool,
                layer_measures: bool = True) -> int:  # fmt: skip
    """What a job that runs the forward passes of ``plans`` keeps beside its resident layers (``reserve_bytes``: its
    largest pass, its widest window, and with ``layer_measures`` the layer measurement's work), and on torch's CPU
    backend its own part beside the layers (interpreter, index, units, samples)."""
    window = WINDOW_BATCHES * shard.batch_size
    widest, tokens = 0, 1
    for plan in plans:
        starts = np.arange(0, len(plan.sentence_ids), window)
        widest = max(widest, int(np.diff(plan.unit_offsets[np.append(starts, len(plan.sentence_ids))]).max(initial=0)))
        tokens = max(tokens, batch_tokens(plan, shard))
    reserve = reserve_bytes(d=d, n_layers=n_layers, batch_tokens=tokens, widest_window=widest,
                            itemsize=backend.itemsize(shard.storage_dtype), on_cuda=on_cuda,
                            layer_measures=layer_measures)  # fmt: skip
    return reserve + (0 if on_cuda else BASE_MB * MB)


@dataclass(frozen=True)
class ModelFiles:
    """What a device job reads: the model (its key, source.json and materialised folder) and its plan of one corpus
    (tokens, units and occurrences)."""

    key: str
    corpus: str
    record: Path
    model_dir: Path
    tokens: Path
    units: Path
    occurrences: Path


@dataclass(frozen=True)
class DevicePlace:
    """Where a device job measures: ``device`` (``metrics.device`` as asked, or the device chosen), the share of its
    memory the resident layers may fill (``metrics.device_memory_fraction``), the job's own memory (its mem_mb: on
    torch's CPU backend the groups are planned in it), its ``part`` of ``parts`` of the layers, its ``threads``
    (torch's, and the host's threads that finish layers) and the GPUs its rule gave it (its ``gpu`` resource)."""

    device: str
    memory_fraction: float
    job_memory_mb: int
    parts: int = 1
    part: int = 0
    threads: int = 1
    gpus: int = 0


@dataclass(frozen=True)
class LayerFiles:
    """Where ``measure_model`` writes: each layer's record, words table and PC vectors into ``folder`` (the
    layout's per-layer names, relative to the model's metrics folder) with ``provenance``'s digest; with ``sample``,
    each layer's similarity sample; with ``resume``, the layers an earlier job of the part finished are kept."""

    folder: Path
    provenance: dict
    sample: SampleRequest | None = None
    resume: Resume | None = None


@dataclass(frozen=True)
class PartFiles:
    """What a ``measure_model`` job writes: its part's per-layer files packed into ``tar``, the ``record`` of what its
    rows were made from, and with ``sample`` the part's similarity sample."""

    tar: Path
    record: Path
    sample: SampleRequest | None = None


def measure_model(*, read: ModelFiles, shard: ShardSettings, measure: MeasureSettings, place: DevicePlace,
                  out: LayerFiles, encoder=None, log: logging.Logger = LOG) -> dict:  # fmt: skip
    """Measure ``place``'s part of the layers of ``read``'s model on ``place.device`` (but those ``out.resume`` kept
    from an earlier job of the part), writing each layer's files into ``out`` (``LayerFiles``); ``place.threads``
    finish layers on the host at once. Returns the job's figures (its layers, groups, seconds, peak device memory)
    and the model's shape (``encoder``: the model already loaded, ``contextuality.study``'s, an encoder or a loaded
    Hugging Face model; else loaded from ``read.model_dir``)."""
    import torch

    device = place.device
    deterministic(device)
    started = time.perf_counter()
    record = json.loads(Path(read.record).read_text())
    plan = read_plan(read.tokens, read.units)
    encoder = load_encoder(read.key, shard, record, read.model_dir, device) if encoder is None else encoder_for(encoder)
    index = OccurrenceIndex.from_parquet(read.occurrences)
    units = read_units(read.units) if measure.geometry else None
    n_rows, d, n_layers = len(plan.units), encoder.width, encoder.n_layers
    layers = part_layers(n_layers, place.parts, place.part)
    todo, kept = _left_to_measure(layers, out.resume, out.sample)
    itemsize = backend.itemsize(shard.storage_dtype)
    on_cuda = str(device).startswith("cuda")
    reserve = job_reserve([plan], shard, d=d, n_layers=n_layers, on_cuda=on_cuda)
    free = free_device_bytes(device, place.job_memory_mb, held_bytes(int(record.get("weights_bytes", 0))))
    fraction, layer_bytes = usable_fraction(device, place.memory_fraction), n_rows * d * itemsize
    groups = (plan_groups(todo, layer_bytes, free, fraction, reserve, None if on_cuda else place.job_memory_mb)
              if todo else GroupPlan([], layer_bytes, 0, 0, reserve))  # fmt: skip
    log.info("%s on %s: %d rows x %d dims, layers %s of %d%s; %s", read.key, device, n_rows, d,
             f"{layers[0]}-{layers[-1]}" if layers else "none", n_layers,
             f" ({kept} kept from an earlier job of this part)" if kept else "",
             groups.describe(n_layers) if todo else "nothing to measure")  # fmt: skip
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    digest = provenance_module.digest(out.provenance)
    seconds = _measure_groups(groups.groups, encoder=encoder, plan=plan, shard=shard, measure=measure, index=index,
                              units=units, device=device, out=out, digest=digest, host_threads=place.threads,
                              model_key=read.key, log=log)  # fmt: skip
    if out.sample is not None:
        out.sample.finish(model=read.key, n_layers=n_layers, provenance_sha256=digest)
    planned_peak = groups.reserve_bytes + max(map(len, groups.groups), default=0) * groups.layer_bytes
    figures = {
        "device": str(device), "layers": layers, "groups": groups.groups, "n_layers": n_layers, "rows": n_rows,
        "dim": d, "n_sentences": len(plan.sentence_ids), "tokens": int(plan.n_tokens),
        "final_norm": encoder.final_norm, "forward_seconds": seconds["forward"],
        "measure_seconds": seconds["measure"], "host_seconds": seconds["host"], "host_wait_seconds": seconds["host_wait"],
        "seconds": time.perf_counter() - started, "planned_peak_bytes": planned_peak,
        "peak_bytes": int(torch.cuda.max_memory_allocated(torch.device(device))) if on_cuda else None,
    }  # fmt: skip
    log.info("done: %s", json.dumps(figures))
    return figures


def _left_to_measure(layers: list[int], resume: Resume | None, sample: SampleRequest | None):
    """The part's layers an earlier job did not finish (all of them without ``resume``), and those it did, whose
    kept sample rows go to ``sample``."""
    kept = [layer for layer in layers if resume is not None and layer in resume.done]
    for layer in kept if sample is not None else []:
        sample.add_gathered(layer, resume.kept_sample(layer))
    return [layer for layer in layers if layer not in kept], kept


def _measure_groups(groups: list[list[int]], *, encoder: Encoder, plan, shard: ShardSettings,
                    measure: MeasureSettings, index, units, device: str, out: LayerFiles, digest: str,
                    host_threads: int, model_key: str, log: logging.Logger) -> dict:  # fmt: skip
    """Each group's pass over the corpus (``fill_group``), then each of its layers measured on the device and
    finished on the host, in threads beside the device's next layer, into ``out_folder`` (and its similarity
    sample written by ``out.sample``). Returns the seconds spent: forward passes, measuring on the device, on
    the host, and waiting for the host at the end."""
    import torch

    on_cuda = str(device).startswith("cuda")
    storage = getattr(torch, shard.storage_dtype)
    n_rows, d = len(plan.units), encoder.width
    out_folder, sample, resume = out.folder, out.sample, out.resume
    block_rows = GPU_BLOCK_ROWS if on_cuda else BLOCK_ROWS
    seconds, host_seconds = {"forward": 0.0, "measure": 0.0}, []

    def finish_and_write(layer: int, finish) -> None:  # in a host thread: no row is read
        tick = time.perf_counter()
        write_layer_results(
            finish(), out_folder / layout.path(layout.in_metrics(layout.LAYER_RECORD), layer=layer),
            out_folder / layout.path(layout.in_metrics(layout.LAYER_WORDS), layer=layer),
            out_folder / layout.path(layout.in_metrics(layout.PCS), layer=layer), provenance_sha256=digest,
        )  # fmt: skip
        if resume is not None:
            resume.mark(layer)  # its files (and sample rows) written: a later job of the part keeps them
        host_seconds.append(time.perf_counter() - tick)  # list.append: one step, safe across threads

    # The measures on the host's copies of drawn rows (the panel's isotropy measures, the bootstrap) run in
    # threads beside the device's next layer, so the device does not wait for them; numpy's BLAS one thread
    # each (the threads are the parallelism, and a threaded OpenBLAS beside OpenMP threads may hang).
    with (
        torch.inference_mode(),
        ThreadPoolExecutor(max_workers=max(1, host_threads)) as host,
        threadpool_limits(limits=1, user_api="blas"),
    ):
        pending = []
        for number, group in enumerate(groups, 1):
            tick = time.perf_counter()
            resident = torch.empty((len(group), n_rows, d), dtype=storage, device=device)
            fill_group(encoder, plan, group, resident, shard, device,
                        desc=f"{model_key} layers {group[0]}-{group[-1]} ({number}/{len(groups)})")  # fmt: skip
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
            seconds["forward"] += time.perf_counter() - tick
            tick = time.perf_counter()
            for slot, layer in enumerate(group):
                rows = RowsInMemory(
                    resident[slot], plan.unit_offsets, path=f"{model_key} layer {layer} ({device})",
                    stored_dtype=shard.storage_dtype, after_final_norm=encoder.after_final_norm(layer),
                    block_rows=block_rows, sentence_ids=plan.sentence_ids, remedy=NON_FINITE_REMEDY,
                )  # fmt: skip
                finish = measure_rows_then(rows, layer, index, measure, model=model_key, units=units, log=log)
                if sample is not None:
                    gathered = sample.add(layer, resident[slot])
                    if resume is not None:
                        resume.keep_sample(layer, gathered)
                pending.append(host.submit(finish_and_write, layer, finish))
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
            seconds["measure"] += time.perf_counter() - tick
            del resident
            if on_cuda:
                torch.cuda.empty_cache()
        tick = time.perf_counter()
        for done in pending:
            done.result()  # a host step's error, raised here
        seconds["host_wait"] = time.perf_counter() - tick
    return {**seconds, "host": sum(host_seconds)}


def run_measure_model_job(*, read: ModelFiles, shard: ShardSettings, measure: MeasureSettings, place: DevicePlace,
                          out: PartFiles, log: logging.Logger = LOG) -> dict:  # fmt: skip
    """Everything one ``measure_model`` job does: pick its device (``place.device``, ``metrics.device``, and its
    ``gpu`` resource), measure its part's layers there (on torch's CPU backend in groups that fit
    ``place.job_memory_mb``, its mem_mb), pack their files into ``out.tar``, write ``out.record`` (and with
    ``out.sample``, the part's similarity sample)."""
    with job_device(place.device, place.gpus, place.part, threads=place.threads, compute_dtype=shard.compute_dtype,
                    setting="metrics.device", job="device measurement job", rule="measure_model") as device:  # fmt: skip
        tell_terminal(f"{read.key}, {corpus_label(read.corpus)}: every layer of part {place.part} of {place.parts} "
                      "measured beside its forward passes, on "
                      f"{describe(device)}{'' if str(device).startswith('cuda') else ' (torch CPU backend)'}")  # fmt: skip
        # what a store's manifest would record, less what changes no row here (the number of shards)
        made_from = rows_provenance(shard_provenance(read.key, stored_params(shard), read.record, read.tokens,
                                                     read.units))  # fmt: skip
        # the part's folder before it is packed, with the layers an earlier job of the part finished, if it
        # measured what this one measures (a job killed near its end re-measures only what it had left)
        staging = out.tar.with_suffix("")
        resume = Resume(staging, resume_key(made_from, measure, place.parts, place.part, out.sample))
        figures = measure_model(read=read, shard=shard, measure=measure, place=replace(place, device=device),
                                out=LayerFiles(staging, made_from, out.sample, resume), log=log)  # fmt: skip
        pack(staging, out.tar)
        resume.clear()
        record = device_record(figures, model_key=read.key, provenance=made_from, dtype=shard.storage_dtype)
        with atomic_path(out.record) as tmp:
            tmp.write_text(json.dumps(record, indent=1) + "\n")
        return figures
