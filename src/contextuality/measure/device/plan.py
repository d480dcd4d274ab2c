"""How a device job's layers are grouped: each group's rows stay resident on the device for one forward pass,
as many layers a group as the device's free memory holds beside the forward pass and the measurement.

On torch's CPU backend the layers live in the host's memory, and the job's memory is what the scheduler gave it
(its ``mem_mb``): the job declares what holding its layers at once needs (``cpu_job_bytes``, capped at
``metrics.device_memory_fraction`` of the machine's memory: ``workflow.estimates``), and plans its groups in what
it was given less what it holds beside them (``held_bytes``), so a job given less plans more groups."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.engine.layer_pass import BLOCK_ROWS
from contextuality.measure.engine.streaming import SQUARE_MATRICES
from contextuality.measure.engine.word_stats import BATCH_ELEMENTS

MB = 1 << 20
# Rows per block of the full-layer passes on a GPU (a block's work is a few kernels; larger blocks, fewer launches).
GPU_BLOCK_ROWS = 1 << 16
# What the device keeps beside the resident layers: CUDA's context and the allocator's fragmentation.
CUDA_CONTEXT_MB = 1536
# What a device job's process holds before its groups, on torch's CPU backend: the interpreter with torch,
# transformers, pandas and the measurement's libraries (a shard job's measured 464 MB, doubled, as
# workflow.estimates' extraction base), and each model it loads, twice over while it loads (the checkpoint read
# and the built model).
HOST_BASE_MB = 1000


class DeviceMemoryError(RuntimeError):
    """Not even one layer fits the device's memory: the message says what would."""


class GroupPlan(NamedTuple):
    """The layers measured together, one forward pass per group, and the memory arithmetic behind it."""

    groups: list  # lists of layer indices, ascending, consecutive
    layer_bytes: int  # one resident layer: rows x dim x the storage dtype's bytes
    room_bytes: int  # what the resident layers may take
    free_bytes: int  # the device's free memory (or the CPU backend's budget) when the job planned
    reserve_bytes: int  # kept for the model's forward pass and the measurement's work

    def describe(self, n_layers: int) -> str:
        passes = len(self.groups)
        full = sum((max(group) + 1) / n_layers for group in self.groups)
        return (f"{passes} group(s) of <= {max(len(g) for g in self.groups)} layers: {passes} forward pass(es), "
                f"{full:.2f} full-pass equivalents with early stop; a layer holds {self.layer_bytes / MB:.0f} MB, the "
                f"groups may take {self.room_bytes / MB:.0f} MB of {self.free_bytes / MB:.0f} MB free "
                f"({self.reserve_bytes / MB:.0f} MB kept for the forward pass and the measurement)")  # fmt: skip


def reserve_bytes(*, d: int, n_layers: int, batch_tokens: int, widest_window: int, itemsize: int, on_cuda: bool,
                  layer_measures: bool = True) -> int:  # fmt: skip
    """Device memory kept beside the resident layers: a forward pass's hidden states of every layer (float32
    at most) and a window of every layer's rows; with ``layer_measures`` (measure_model's, not the sense job's,
    whose measures run on host copies) the measurement's d x d float64 matrices, word batches (float64 copies of
    a stacked batch, a few at once) and blocks of rows (``GPU_BLOCK_ROWS``, on the CPU ``layer_pass.BLOCK_ROWS``);
    and on CUDA the context and fragmentation."""
    forward = batch_tokens * n_layers * d * 4 * 2
    window = n_layers * widest_window * d * itemsize
    blocks = GPU_BLOCK_ROWS if on_cuda else BLOCK_ROWS
    measure = SQUARE_MATRICES * d * d * 8 + 8 * BATCH_ELEMENTS * 8 + blocks * d * 8 * 3 if layer_measures else 0
    return forward + window + measure + (CUDA_CONTEXT_MB * MB if on_cuda else 0)


def layer_room(free_bytes: int, fraction: float, reserve: int) -> int:
    """Bytes the resident layers may take: ``fraction`` of ``free_bytes`` less ``reserve`` (a test that wants a
    schedule of several groups replaces this function)."""
    return int(free_bytes * fraction) - reserve


def plan_groups(layers: list[int], layer_bytes: int, free_bytes: int, fraction: float, reserve: int,
                job_memory_mb: int | None = None) -> GroupPlan:  # fmt: skip
    """Consecutive groups of ``layers``, as few as fit: each group's rows within ``fraction`` of ``free_bytes``
    less ``reserve`` (``layer_room``); sizes balanced (13 layers in 2 groups: 7 + 6).
    ``job_memory_mb``: on torch's CPU backend, the job's own memory that ``free_bytes`` was taken from (the
    refusal then says how to give it more)."""
    room = layer_room(free_bytes, fraction, reserve)
    if room < layer_bytes:
        if job_memory_mb is None:
            where = (f"the device has {free_bytes / MB:.0f} MB free and {max(room, 0) / MB:.0f} MB of it for layers "
                     f"(metrics.device_memory_fraction {fraction}, {reserve / MB:.0f} MB kept for the forward pass and "
                     "the measurement): raise metrics.device_memory_fraction or use a larger device")  # fmt: skip
        else:
            where = (f"the job was given {job_memory_mb} MB of host memory (its mem_mb), {max(room, 0) / MB:.0f} MB of "
                     f"it for layers beside its model and {reserve / MB:.0f} MB kept for the forward pass and the "
                     "measurement: give it more (--set-resources RULE:mem_mb=N; its declaration is capped at "
                     "metrics.device_memory_fraction of this machine's memory) or use a machine with more")  # fmt: skip
        raise DeviceMemoryError(f"one layer's rows take {layer_bytes / MB:.0f} MB, but {where}, or measure from the "
                                "store (metrics.on_device: false)")  # fmt: skip
    per_group = max(1, room // layer_bytes)
    count = -(-len(layers) // per_group)
    groups = [list(part) for part in np.array_split(np.asarray(layers), count)]
    return GroupPlan([[int(layer) for layer in group] for group in groups], layer_bytes, room, free_bytes, reserve)


def held_bytes(weights_bytes: int, models: int = 1) -> int:
    """Host memory a device job holds beside its groups on torch's CPU backend: ``HOST_BASE_MB`` and ``models``
    loaded models of ``weights_bytes``, each twice over while it loads."""
    return HOST_BASE_MB * MB + 2 * models * weights_bytes


def cpu_job_bytes(*, held: int, reserve: int, layer_bytes: int, n_layers: int) -> int:
    """Host memory a job on torch's CPU backend needs to hold ``n_layers`` layers at once (one forward pass):
    what it holds (``held_bytes``), its reserve for the forward pass and the measurement, and the layers."""
    return held + reserve + layer_bytes * n_layers


def free_device_bytes(device: str, job_memory_mb: int, held: int = 0) -> int:
    """The device's free memory (CUDA), or on torch's CPU backend the job's own memory (``job_memory_mb``, what the
    scheduler gave it: its ``mem_mb``) less what it holds beside its groups (``held``)."""
    if str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return max(job_memory_mb * MB - held, 0)


def usable_fraction(device: str, fraction: float) -> float:
    """The share of ``free_device_bytes`` a job's groups and their work may take: ``metrics.device_memory_fraction``
    on CUDA; on torch's CPU backend all of it, as the job's declaration already kept to that share of the machine."""
    return fraction if str(device).startswith("cuda") else 1.0
