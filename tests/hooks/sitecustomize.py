"""Test-only hooks, loaded by every Python process of a workflow run whose PYTHONPATH starts with this
folder (the tests and tests/slurm/run.sh set it; normal runs never do). Each hook is off unless its
variable is set:

* GUARANTEES_AUDIT_DIR: every process appends one JSON line per file it opens for writing and per
  rename (``os.rename``/``os.replace``) to ``<dir>/<pid>.jsonl`` (Python's audit events).
* GUARANTEES_SLOW_EXTRACT: an extraction job sleeps this many seconds before each window of
  sentences, so that a test can kill it in the middle of a shard.
* GUARANTEES_SCALE_ACTIVATIONS: an extraction job multiplies every hidden state of the model by this
  factor ("nan": the model gives NaN everywhere; a large one: values beyond float16's range).
* TEST_FAKE_GPUS=N: an extraction job runs as if CUDA showed N devices (the same device choice and
  leases as on a GPU machine, or the one device a scheduler gave it) but computes on the CPU, and
  appends one JSON line per shard (shard, device, CUDA_VISIBLE_DEVICES, SLURM_JOB_ID, host, pid,
  start and end of its lease) to ``<lease folder>/fake-devices.jsonl``.
* TEST_FREE_BYTES=N: every process sees N bytes free on every disk (``contextuality.core.diskspace.free_bytes``):
  a small disk, for the checks made before any job and in each job.
* TEST_MACHINE_BYTES=N: the machine's memory is N bytes (``contextuality.workflow.estimates.machine_memory_bytes``).
"""

import os
import sys

_AUDIT_DIR = os.environ.get("GUARANTEES_AUDIT_DIR")
if _AUDIT_DIR:
    import json

    _busy = [False]
    _log_path = os.path.join(_AUDIT_DIR, f"{os.getpid()}.jsonl")
    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def _name(path):
        if isinstance(path, int) or path is None:
            return None
        return os.path.abspath(os.fsdecode(path))

    def _audit(event, args):
        if _busy[0] or event not in ("open", "os.rename"):
            return
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if not writing or _name(path) is None:
                return
            record = {"event": "write", "path": _name(path)}
        else:
            record = {"event": "rename", "src": _name(args[0]), "dst": _name(args[1])}
        record["argv0"] = sys.argv[0] if sys.argv else ""
        _busy[0] = True
        try:
            with open(_log_path, "a") as out:
                out.write(json.dumps(record) + "\n")
        finally:
            _busy[0] = False

    sys.addaudithook(_audit)

_FREE = os.environ.get("TEST_FREE_BYTES")
if _FREE:
    import contextuality.core.diskspace as _diskspace

    _diskspace.free_bytes = lambda path: int(_FREE)

_MACHINE = os.environ.get("TEST_MACHINE_BYTES")
if _MACHINE:
    import contextuality.workflow.estimates as _estimates

    _estimates.machine_memory_bytes = lambda: int(_MACHINE)

_SLOW = os.environ.get("GUARANTEES_SLOW_EXTRACT")
if _SLOW and sys.argv and sys.argv[0].endswith("extract.py"):
    import time

    import contextuality.extraction.windows as _windows

    _padded_batches = _windows.padded_batches

    def _slow_padded_batches(*args, **kwargs):  # called once per window of sentences
        time.sleep(float(_SLOW))
        yield from _padded_batches(*args, **kwargs)

    _windows.padded_batches = _slow_padded_batches

_SCALE = os.environ.get("GUARANTEES_SCALE_ACTIVATIONS")
if _SCALE and sys.argv and sys.argv[0].endswith("extract.py"):
    import contextuality.extraction.windows as _windows

    _model_forward = _windows.model_forward

    def _scaled_model_forward(loaded):
        forward = _model_forward(loaded)
        return lambda ids, mask: [states * float(_SCALE) for states in forward(ids, mask)]

    _windows.model_forward = _scaled_model_forward

_FAKE_GPUS = os.environ.get("TEST_FAKE_GPUS")
if _FAKE_GPUS and sys.argv and sys.argv[0].endswith("extract.py"):
    import json
    import socket
    import time

    import torch

    import contextuality.extraction.devices as _devices

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: int(_FAKE_GPUS)
    _choose_device = _devices.choose_device

    class _RecordedLease:
        """The real lease (or None), and this shard's record, written with the release time on close()."""

        def __init__(self, lease, record, path):
            self.lease, self.record, self.path = lease, record, path

        def close(self):
            if self.lease is not None:
                self.lease.close()
            with open(self.path, "a") as out:  # one short O_APPEND write per shard: lines never interleave
                out.write(json.dumps({**self.record, "end": time.time()}) + "\n")

    def _fake_choose_device(requested, gpus, shard, lease_dir, *args, **kwargs):
        device, lease = _choose_device(requested, gpus, shard, lease_dir, *args, **kwargs)
        lease_dir.mkdir(parents=True, exist_ok=True)
        record = {
            "shard": shard,
            "device": device,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "start": time.time(),
        }
        return "cpu", _RecordedLease(lease, record, lease_dir / "fake-devices.jsonl")

    _devices.choose_device = _fake_choose_device
