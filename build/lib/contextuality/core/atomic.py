"""Write-then-rename, so that a crash never leaves a half-written file under its final name."""

from __future__ import annotations

import contextlib
import os
import re
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
    # A writer killed outright (SIGKILL, node loss) cannot clean up: drop its leftovers first. Only one
    # job ever writes a given output, so no live writer owns them.
    for stale in stale_temporaries(path):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
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


def stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Temporary siblings of ``path`` left by an earlier writer (same naming as ``atomic_path``)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(path.stem)}\.tmp-[0-9a-f]{{8}}{re.escape(path.suffix)}$")
    return sorted(candidate for candidate in path.parent.iterdir() if pattern.match(candidate.name))
