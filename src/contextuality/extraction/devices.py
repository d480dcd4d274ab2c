"""Which device an extraction job computes on, and the lease that keeps a GPU its own for the job's life.

One policy, Snakemake's resources: an extraction job computes on a GPU when its rule gave it one
(``resources: gpu=1``, see ``workflow/rules/common.smk: gpus_per_shard``), and on a machine that runs
several shards at once it leases one of the run's GPUs (``--resources gpu=N``, the environment variable
``CONTEXTUALITY_LOCAL_GPUS`` the workflow sets from it).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from contextuality.extraction.heap import keep_freed_memory

log = logging.getLogger(__name__)

LOCAL_GPUS_ENV = "CONTEXTUALITY_LOCAL_GPUS"  # the run's `gpu` resource (--resources gpu=N), set by common.smk
LEASE_DIR = Path("resources") / ".gpu-leases"  # the run's GPU leases (``_lease``), beside the run's resources


class DeviceError(RuntimeError):
    """No device matches the configuration; the message says what was asked and what is visible."""


def visible_gpus() -> int:
    """The NVIDIA GPUs this process may use: those ``CUDA_VISIBLE_DEVICES`` lists when it is set, read as CUDA
    reads it (``listed_devices``), else those the driver shows (/proc/driver/nvidia/gpus: no CUDA context, no torch
    import, none on a machine without one)."""
    driver = Path("/proc/driver/nvidia/gpus")
    installed = len(list(driver.iterdir())) if driver.is_dir() else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len(listed_devices(listed, installed if driver.is_dir() else None))
    return installed


def listed_devices(value: str, installed: int | None = None) -> list[str]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value gives a process, as CUDA (and torch's parser) reads it: comma-
    separated ordinals (the digits an entry starts with, ``1gpu`` is 1) or UUIDs (``GPU-...``, ``MIG-...``, all of the
    first entry's kind); the list stops at the first entry that is neither (``-1``, ``NoDevFiles``, an empty entry)
    and, when ``installed`` (the driver's count) is known, at the first ordinal beyond it. A device listed twice
    leaves CUDA no device at all: refused (DeviceError) rather than counted."""
    entries = [entry.strip() for entry in value.split(",")]
    kind = next((prefix for prefix in ("GPU-", "MIG-") if entries[0].startswith(prefix)), None)
    devices: list[str] = []
    for entry in entries:
        if kind is not None:
            device = entry if entry.startswith(kind) else None
        else:
            digits = re.match(r"[+]?\d+", entry)
            device = str(int(digits.group())) if digits else None
            if device is not None and installed is not None and int(device) >= installed:
                device = None
        if device is None:
            break
        if device in devices:
            raise DeviceError(
                f"CUDA_VISIBLE_DEVICES={value!r} lists device {device} twice, which leaves CUDA no device: list each "
                "GPU once (e.g. CUDA_VISIBLE_DEVICES=0,1), or unset it to use every GPU of this machine"
            )
        devices.append(device)
    return devices


def gpu_line(count: int) -> str:
    """What the terminal says at the start of a run that found GPUs (``visible_gpus``) and was given no count."""
    return (f"contextuality: {count} GPU{'s' if count > 1 else ''} found: extraction and device measurement jobs "
            "compute on them (--resources gpu=0 keeps every job on the CPU)")  # fmt: skip


def describe(device: str) -> str:
    """The device a job computes on, as its terminal line says it: ``cuda:0 (NVIDIA H200)`` or ``the CPU``."""
    if not str(device).startswith("cuda"):
        return "the CPU"
    import torch

    return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"


def _visible() -> list[str]:
    """The devices ``CUDA_VISIBLE_DEVICES`` lists, as CUDA reads it ([] when it is not set)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [] if listed is None else listed_devices(listed)


def choose_device(requested: str, gpus: int, shard: int, lease_dir: Path, local_gpus: int | None = None, *,
                  compute_dtype: str = "float32", setting: str = "extraction.device", job: str = "extraction job",
                  rule: str = "extract") -> tuple[str, object]:  # fmt: skip
    """The torch device for a shard, and the lease that keeps it ours (or None).

    ``requested`` is ``extraction.device``; ``gpus`` the GPUs the job's rule was given (its ``gpu``
    resource); ``local_gpus`` the run's ``gpu`` resource, the GPUs of this machine the shards share
    (default: the environment variable the workflow sets); ``compute_dtype`` is
    ``extraction.compute_dtype``: float16 and bfloat16 are refused on the CPU (half precision there
    is slow and not what the configuration promised). ``setting``, ``job`` and ``rule`` name the config key,
    the kind of job and its rule in messages (the device measurement's job computes the same way).

    * ``cpu``: the CPU. ``cuda:N``: exactly that device, no lease.
    * ``auto``: a GPU when the job was given one, else the CPU. ``cuda``: a GPU (the job must have one).
    * ``CUDA_VISIBLE_DEVICES`` lists exactly one device: a scheduler (SLURM ``--gpus=1``, Kubernetes)
      gave this job its GPU, which the process sees as ``cuda:0`` whatever its physical id: use
      ``cuda:0`` without a lease (jobs on other nodes share the lease folder on a cluster).
    * Otherwise (one machine, several shards at once): the job takes a non-blocking ``flock`` on the
      first free lease of the run's GPUs, starting at ``shard mod count`` (count = ``local_gpus``,
      capped at the devices CUDA reports; the indices of ``CUDA_VISIBLE_DEVICES`` if it lists several).
      The lease is held for the life of the process, so the kernel frees it even on SIGKILL; its file
      is named by host and physical id, so two jobs never share a device even when their
      ``CUDA_VISIBLE_DEVICES`` differ. Snakemake's ``gpu`` resource caps how many shards run at once,
      so a lease is free at once; if not, the job waits for one and never shares.
    """
    import torch

    if requested == "cpu" or (requested == "auto" and gpus < 1):
        if compute_dtype != "float32":
            raise DeviceError(
                f"extraction.compute_dtype: {compute_dtype} computes only on CUDA, but this {job} computes on "
                f"the CPU ({setting} '{requested}', and the job was given no GPU); run with --resources gpu=N "
                f"(or a cluster profile that gives {rule} jobs gpu: 1), or set extraction.compute_dtype: float32"
            )
        return "cpu", None
    if requested.startswith("cuda:"):
        return requested, None
    if gpus < 1:
        raise DeviceError(
            f"{setting} is 'cuda' but this {job} was given no GPU: run with --resources gpu=N "
            f"(the GPUs of this machine), or a cluster profile that gives {rule} jobs gpu: 1"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"this {job} was given a GPU ({setting} '{requested}'), but torch sees no CUDA device "
            f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); install a "
            f"CUDA build of torch, or use {setting}: cpu"
        )
    visible = _visible()
    if len(visible) == 1:
        return "cuda:0", None
    count = len(visible) or torch.cuda.device_count()
    local = int(os.environ.get(LOCAL_GPUS_ENV) or 0) if local_gpus is None else local_gpus
    if local:
        count = min(count, local)
    if count < 1:
        raise DeviceError(f"{setting} is '{requested}' but no CUDA device is visible")
    return _lease(count, visible, shard, lease_dir)


def _lease(count: int, visible: list[str], shard: int, lease_dir: Path) -> tuple[str, object]:
    lease_dir.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    waited = 0
    while True:
        for offset in range(count):
            index = (shard + offset) % count
            physical = visible[index] if visible else str(index)
            candidate = open(lease_dir / f"{host}-gpu{physical}.lock", "w")
            try:
                fcntl.flock(candidate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                candidate.close()
                continue
            candidate.write(f"{os.getpid()} shard {shard}\n")
            candidate.flush()
            return f"cuda:{index}", candidate
        # every lease is held by a live process (the kernel drops a dead one's): wait, never share
        if waited % 60 == 0:
            log.warning("shard %d: all %d GPU leases in %s are held; waiting", shard, count, lease_dir)
        time.sleep(1)
        waited += 1


@contextmanager
def job_device(requested: str, gpus: int, slot: int, *, threads: int, compute_dtype: str, **named):
    """The device a job computes on (``choose_device``: ``slot`` its shard or part, ``named`` its setting, job
    and rule for the messages), its GPU's lease held for the ``with`` block. The process is readied first: freed
    memory stays in its heap (``heap.keep_freed_memory``), torch runs ``threads`` threads."""
    import torch

    keep_freed_memory()
    torch.set_num_threads(max(1, threads))
    device, lease = choose_device(requested, gpus, slot, LEASE_DIR, compute_dtype=compute_dtype, **named)
    try:
        yield device
    finally:
        if lease is not None:
            lease.close()
