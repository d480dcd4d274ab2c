"""The ``measure_senses`` job on the device path (``metrics.on_device``): every layer of both corpora computed where
the model's forward passes leave it, so no store is written or read.

As ``measure.device_job.measure_model`` measures a model: the model loaded for extraction, the plans of the study's
corpus and of the WordNet usages' corpus read, the layers taken in groups that fit the device
(``device_plan.plan_groups``; each resident layer holds both corpora's rows), each group filled by one forward
pass per corpus (``device_job.fill_group``: extraction's windows, batches, pooling and cast to
``extraction.storage_dtype``, stopping after the group's deepest layer). A layer's rows are so the values the
store would hold; converted to float32 host arrays (``SENSE_LAYER_DTYPE``, as the store path reads them) they go
to the same per-layer measures (``senses.job.measure_layer_rows``), layer 0 first (the paired bootstrap's
control). On torch's CPU backend the groups are planned in the job's own memory (its ``mem_mb``), less the two
models it loads (the one it runs, and the one with its output head) and the measures' work (``senses.memory``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.settings import SENSE_LAYER_DTYPE, ShardSettings
from contextuality.measure.device.plan import free_device_bytes, held_bytes, plan_groups, usable_fraction
from contextuality.measure.device_job import deterministic, fill_group, job_reserve
from contextuality.measure.engine import backend
from contextuality.senses import memory
from contextuality.senses.job import SenseJob, measure_layer_rows, prepare

LOG = logging.getLogger(__name__)
# The models the job loads: the one its forward passes run, and the one with its output head (the lens)
MODELS_LOADED = 2


def plan_sense_groups(loaded, plans: tuple, shard: ShardSettings, *, device: str, memory_fraction: float,
                      job_memory_mb: int, weights_bytes: int):  # fmt: skip
    """The groups of layers whose rows of both corpora (``plans``: the study's, the usages') fit the device at once,
    beside the forward passes and the measurement (``device_plan.plan_groups``)."""
    on_cuda = str(device).startswith("cuda")
    d = loaded.width
    rows = sum(len(plan.units) for plan in plans)
    reserve = job_reserve(list(plans), shard, d=d, n_layers=loaded.n_layers, on_cuda=on_cuda, layer_measures=False)
    if not on_cuda:  # the measures' float32 rows and work live beside the resident layers in the host's memory
        reserve += memory.work_bytes(rows, d)
    free = free_device_bytes(device, job_memory_mb, held_bytes(weights_bytes, MODELS_LOADED))
    layer_bytes = rows * d * backend.itemsize(shard.storage_dtype)  # both corpora's rows of one layer
    fraction = usable_fraction(device, memory_fraction)
    return plan_groups(list(range(loaded.n_layers)), layer_bytes, free, fraction, reserve,
                       None if on_cuda else job_memory_mb)  # fmt: skip


def layer_rows(loaded, plans: tuple, groups: list[list[int]], shard: ShardSettings, device: str, model: str):
    """Each layer's rows of both corpora, layer 0 first: (layer, the study corpus's rows, the usages' rows), float32
    host arrays in storage order. A group's rows are resident at once, filled by one forward pass per corpus."""
    import torch

    storage, d = getattr(torch, shard.storage_dtype), loaded.width
    for number, group in enumerate(groups, 1):
        resident = []
        for name, plan in zip(("study corpus", "usages"), plans):
            resident.append(torch.empty((len(group), len(plan.units), d), dtype=storage, device=device))
            desc = f"{model} senses, {name}, layers {group[0]}-{group[-1]} ({number}/{len(groups)})"
            fill_group(loaded, plan, group, resident[-1], shard, device, desc=desc)
        for slot, layer in enumerate(group):
            yield layer, *(_host_float32(rows[slot]) for rows in resident)
        del resident
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()


def _host_float32(rows) -> np.ndarray:
    """A resident layer's rows as a float32 host array: the store path's ``LayerReader.rows(dtype=float32)`` of the
    same values (no copy where they already are float32 on the host)."""
    import torch

    return rows.to(device="cpu", dtype=getattr(torch, SENSE_LAYER_DTYPE)).numpy()


def measure_senses_on_device(
    job: SenseJob,
    *,
    shard: ShardSettings,
    device: str,
    memory_fraction: float,
    job_memory_mb: int,
    log: logging.Logger = LOG,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Every sense measure of every layer of ``job.model``, its layers computed on ``device``: the long ``rows``
    table, the per-word table (as ``senses.job.measure_senses`` gives them from the store), and the job's figures
    (its groups, seconds)."""
    import torch
    from threadpoolctl import threadpool_limits

    from contextuality.extraction.encoders import load_encoder
    from contextuality.extraction.plan import read_plan

    paths, settings, seed, model, threads = job.paths, job.settings, job.seed, job.model, job.threads
    started = time.perf_counter()
    deterministic(device)
    torch.set_num_threads(max(1, threads))
    record = json.loads(Path(paths.record).read_text())
    plans = read_plan(paths.tokens, paths.units), read_plan(paths.senses_tokens, paths.senses_units)
    with threadpool_limits(limits=threads), torch.inference_mode():
        loaded = load_encoder(model, shard, record, paths.model, device)
        groups = plan_sense_groups(
            loaded, plans, shard, device=device, memory_fraction=memory_fraction, job_memory_mb=job_memory_mb,
            weights_bytes=int(record.get("weights_bytes", 0)),
        )  # fmt: skip
        log.info("%s senses on %s: %d + %d rows (study corpus + usages) x %d dims, %d layers; %s", model, device,
                 len(plans[0].units), len(plans[1].units), loaded.width, loaded.n_layers,
                 groups.describe(loaded.n_layers))  # fmt: skip
        context = prepare(paths, settings, seed=seed, head_loader=job.head_loader)  # once the groups fit
        tables = []
        for layer, x, usage_x in layer_rows(loaded, plans, groups.groups, shard, device, model):
            tables.append(measure_layer_rows(context, layer, x, bool(loaded.after_final_norm(layer)), usage_x,
                                             settings, seed=seed, model=model))  # fmt: skip
            del x, usage_x
            log.info("%s senses: layer %d of %d measured", model, layer, loaded.n_layers - 1)
    rows = pd.concat([table for table, _ in tables], ignore_index=True)
    words = pd.concat([table for _, table in tables], ignore_index=True)
    figures = {"device": str(device), "groups": groups.groups, "n_layers": loaded.n_layers,
               "rows": [len(plan.units) for plan in plans], "seconds": time.perf_counter() - started}  # fmt: skip
    log.info("done: %s", json.dumps(figures))
    return rows, words, figures


def run_measure_senses_on_device_job(job: SenseJob, *, requested_device: str, gpus: int, shard: ShardSettings,
                                     **on_device) -> tuple[pd.DataFrame, pd.DataFrame, dict]:  # fmt: skip
    """Everything one device ``measure_senses`` job does: pick its device (``metrics.device``, its ``gpu`` resource)
    and measure there (``measure_senses_on_device``, given ``on_device``'s other arguments)."""
    from contextuality.core.runtime import tell_terminal
    from contextuality.extraction.devices import describe, job_device

    with job_device(requested_device, gpus, 0, threads=job.threads, compute_dtype=shard.compute_dtype,
                    setting="metrics.device", job="device sense measurement job", rule="measure_senses") as device:  # fmt: skip
        tell_terminal(f"{job.model}: every layer's sense measures beside its forward passes (both corpora), on "
                      f"{describe(device)}{'' if str(device).startswith('cuda') else ' (torch CPU backend)'}")  # fmt: skip
        return measure_senses_on_device(job, shard=shard, device=device, **on_device)
