"""Which device an extraction job computes on, and the lease that keeps a GPU its own for the job's life."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)


class DeviceError(RuntimeError):
    """No device matches the configuration; the message says what was asked and what is visible."""


# Test hook (documented in docs/scaling.md): with CONTEXTUALITY_FAKE_GPUS=1 in the environment the
# device choice below runs as if CUDA were present (same leases, same CUDA_VISIBLE_DEVICES handling)
# but the shard is computed on the CPU, and each choice is appended as one JSON line (shard, device,
# CUDA_VISIBLE_DEVICES, SLURM_JOB_ID, host, pid, start and end times) to <lease_dir>/fake-devices.jsonl.
# tests/test_devices.py and tests/slurm/run.sh read that file; normal runs never set the variable.
FAKE_GPUS_ENV = "CONTEXTUALITY_FAKE_GPUS"


class _RecordedLease:
    """A device lease (flock handle or None) that appends its record with the release time on close()."""

    def __init__(self, handle, record: dict, path: Path):
        self.handle, self.record, self.path = handle, record, path

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        with open(self.path, "a") as out:  # one short O_APPEND write per shard: lines never interleave
            out.write(json.dumps({**self.record, "end": time.time()}) + "\n")


def choose_device(requested: str, n_gpus: int, shard: int, lease_dir: Path) -> tuple[str, object]:
    """The torch device for a shard, and the lease that keeps it ours (or None).

    * ``cpu``, or ``auto`` without CUDA: the CPU. ``cuda:N``: exactly that device, no lease.
    * ``CUDA_VISIBLE_DEVICES`` lists exactly one device: a scheduler (SLURM ``--gpus=1``, Kubernetes,
      or the user) gave this job its GPU, which the process sees as ``cuda:0`` whatever its physical
      id: use ``cuda:0`` without a lease (jobs on other nodes share the lease folder on a cluster).
    * Otherwise (one multi-GPU box): the job takes a non-blocking ``flock`` on the first free lease of
      the visible devices, starting at ``shard mod count`` (count = ``n_gpus``, capped at the devices
      CUDA reports; the indices of ``CUDA_VISIBLE_DEVICES`` if it lists several). The lease is held
      for the life of the process, so the kernel frees it even on SIGKILL; its file is named by host
      and physical id, so two jobs never share a device even when their ``CUDA_VISIBLE_DEVICES``
      differ. Snakemake's ``gpu`` resource (``--resources gpu=N``, one per shard) caps how many shards
      run at once, so a lease is free at once; if not (more jobs than devices), the job waits for one.
    """
    import socket

    import torch

    fake = os.environ.get(FAKE_GPUS_ENV) == "1"
    if requested == "cpu" or (requested == "auto" and not (fake or torch.cuda.is_available())):
        return "cpu", None
    visible = [item.strip() for item in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if item.strip()]
    handle = None
    if requested.startswith("cuda:"):
        device = requested
    elif len(visible) == 1:
        device = "cuda:0"
    else:
        if visible:
            count = len(visible)
        else:
            count = (n_gpus or 1) if fake else torch.cuda.device_count()
        if n_gpus:
            count = min(count, n_gpus)
        if count < 1:
            raise DeviceError(f"extraction.device is '{requested}' but no CUDA device is visible")
        lease_dir.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        device, waited = None, 0
        while device is None:
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
                device, handle = f"cuda:{index}", candidate
                break
            else:
                # every lease is held by a live process (the kernel drops a dead one's): wait, never
                # share. Happens when --resources gpu=N exceeds the devices, or with extraction.n_gpus 0.
                if waited % 60 == 0:
                    log.warning("shard %d: all %d GPU leases in %s are held; waiting", shard, count, lease_dir)
                time.sleep(1)
                waited += 1
    if not fake:
        return device, handle
    lease_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "shard": shard, "device": device, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "host": socket.gethostname(), "pid": os.getpid(),
        "cwd": os.getcwd(), "start": time.time(),
    }
    log.info("fake GPU (%s=1): shard %d would run on %s; computing on the CPU", FAKE_GPUS_ENV, shard, device)
    return "cpu", _RecordedLease(handle, record, lease_dir / "fake-devices.jsonl")
