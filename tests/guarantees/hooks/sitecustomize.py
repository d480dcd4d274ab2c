"""Test-only hooks for tests/guarantees, loaded by every Python process of a workflow run whose
PYTHONPATH starts with this folder (the tests set it; normal runs never do). Each hook is off unless
its variable is set:

* GUARANTEES_AUDIT_DIR: every process appends one JSON line per file it opens for writing and per
  rename (``os.rename``/``os.replace``) to ``<dir>/<pid>.jsonl`` (Python's audit events).
* GUARANTEES_SLOW_EXTRACT: an extraction job sleeps this many seconds before each window of
  sentences, so that a test can kill it in the middle of a shard.
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

_SLOW = os.environ.get("GUARANTEES_SLOW_EXTRACT")
if _SLOW and sys.argv and sys.argv[0].endswith("extract.py"):
    import time

    import contextuality.extract as _extract

    _padded_batches = _extract.padded_batches

    def _slow_padded_batches(*args, **kwargs):  # called once per window of sentences
        time.sleep(float(_SLOW))
        yield from _padded_batches(*args, **kwargs)

    _extract.padded_batches = _slow_padded_batches
