"""Disk space for large outputs: reserved before writing, so concurrent jobs cannot all pass on the same free space.

A job that will write N bytes calls ``reserve(path, N, factor)`` before it starts. Under an exclusive
lock of the run's reservation folder it compares the free space with N x factor plus what the other
live jobs have reserved and not yet written, then records its own reservation: a file it keeps
locked (flock) for its lifetime, so a killed job's reservation dies with it. The reservation folder
is ``<results>/.disk-reservations`` next to the output (the same for every job of a run on this
machine, with a shared file system or with a storage plugin's local copies).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
from pathlib import Path


class DiskSpaceError(RuntimeError):
    """Not enough free disk for an output; the message names the file, the bytes needed and the bytes free."""


def reservation_dir(path: Path) -> Path:
    """``<run>/.disk-reservations``: the folder above an output's ``results`` or ``resources``, else its own."""
    path = Path(path).absolute()
    for parent in path.parents:
        if parent.name in ("results", "resources"):
            return parent.parent / ".disk-reservations"
    return path.parent / ".disk-reservations"


def _live_reservations(folder: Path, own: Path | None = None) -> int:
    """Bytes reserved by live jobs (their reservation file is locked); stale files are removed."""
    total = 0
    for candidate in folder.glob("*.json"):
        if candidate == own:
            continue
        try:
            handle = open(candidate)
        except FileNotFoundError:
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held by a live job
                try:
                    total += int(json.loads(handle.read() or "{}").get("bytes", 0))
                except ValueError:
                    pass
                continue
            candidate.unlink(missing_ok=True)  # nobody holds it: its job ended or was killed
    return total


def free_bytes(path: Path) -> int:
    path = Path(path)
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _size(n_bytes: float) -> str:
    """A byte count as the largest unit that keeps it at least 1 (bytes, kB, MB, GB, TB, PB)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(n_bytes) < 1000:
            return f"{n_bytes:.0f} bytes" if unit == "bytes" else f"{n_bytes:.2f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.2f} PB"


def ways_out(storage_dtype: str | None = None) -> str:
    """What makes room for stored vectors: float16 storage only where they are not float16 already, fewer
    sentences; for anything else (``storage_dtype`` None: a model's files) only more free space."""
    if storage_dtype is None:
        return "free space"
    if str(storage_dtype) != "float16":
        return (
            "free space, set extraction.storage_dtype: float16 (half the bytes of float32), or set corpus.max_sentences"
        )
    return "free space, or set corpus.max_sentences (the vectors are float16 already)"


@contextlib.contextmanager
def reserve(
    path: Path,
    needed: int,
    factor: float = 1.0,
    *,
    setting: str = "extraction.min_free_disk_factor",
    ways: str = "free space",
):
    """Check that ``needed`` x ``factor`` bytes fit beside the other live reservations, and hold a reservation.

    Raises DiskSpaceError before anything is written, naming ``ways`` out (``ways_out``). The reservation is
    released when the block ends (or the process dies).
    """
    path = Path(path)
    folder = reservation_dir(path)
    folder.mkdir(parents=True, exist_ok=True)
    own = folder / f"{socket.gethostname()}-{os.getpid()}-{path.name}.json"
    lock = os.open(folder, os.O_RDONLY)  # the folder itself is the lock: no lock file is left behind
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one check-and-record at a time
        free = free_bytes(path.parent)
        others = _live_reservations(folder, own)
        if free - others < needed * factor:
            held = f", of which {_size(others)} are reserved by other running jobs" if others else ""
            raise DiskSpaceError(
                f"not enough disk for {path}: it needs {_size(needed)} x margin {factor:g} ({setting}) = "
                f"{_size(needed * factor)}, and {_size(free)} are free{held}; {ways}"
            )
        handle = open(own, "w")
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(json.dumps({"bytes": int(needed), "path": str(path)}))
        handle.flush()
    finally:
        os.close(lock)
    try:
        yield
    finally:
        own.unlink(missing_ok=True)
        handle.close()
