"""Write-then-rename, so that a crash never leaves a half-written file under its final name."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary sibling of ``path``; rename it to ``path`` only if the block succeeds.

    The temporary name keeps the suffix (libraries pick formats by extension) and lives in the same
    directory, so the final ``os.replace`` is atomic on POSIX file systems. A directory may be
    written too: whatever exists at the temporary path when the block ends is moved into place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
