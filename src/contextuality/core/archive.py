"""A folder as one file: the form in which a model's download and build are workflow outputs.

A ``directory()`` output made by a job without a shared file system (Kubernetes) is reported
missing by snakemake-storage-plugin-s3 0.3.6 (docs/scaling.md, "Upstream"), so the workflow declares
``model.tar`` instead of ``model/``. The job that makes the folder packs it (``pack``); every job that
reads it calls ``unpacked``, which unpacks the archive once beside itself (``model.tar`` -> ``model/``)
and reuses that folder while it carries the archive's modification time (set when packed or unpacked).
The tar holds no time, owner or order of its own, so the same folder gives the same bytes.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from contextuality.core.atomic import atomic_path


def folder_of(archive: str | os.PathLike) -> Path:
    """The folder an archive unpacks to: its path without ``.tar``."""
    archive = Path(archive)
    if archive.suffix != ".tar":
        raise ValueError(f"{archive}: not a .tar archive")
    return archive.with_suffix("")


def _mark(folder: Path, archive: Path) -> None:
    """Give ``folder`` the archive's modification time: the sign that it is this archive's unpacked form."""
    os.utime(folder, ns=(folder.stat().st_atime_ns, archive.stat().st_mtime_ns))


def _is_unpacked_form(folder: Path, archive: Path) -> bool:
    return folder.is_dir() and folder.stat().st_mtime_ns == archive.stat().st_mtime_ns


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack(folder: str | os.PathLike, archive: str | os.PathLike) -> Path:
    """Write ``folder``'s files into ``archive`` (sorted, no times or owners), and mark ``folder`` as its unpacked form."""
    folder, archive = Path(folder), Path(archive)
    if folder_of(archive) != folder:
        raise ValueError(f"{archive} must sit beside {folder} and share its name")
    with atomic_path(archive) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False, filter=_normalised)
    _mark(folder, archive)
    return archive


def unpacked(archive: str | os.PathLike) -> Path:
    """The folder ``archive`` holds: the one beside it when it was unpacked from (or packed into) this archive, else
    unpacked now.

    Several jobs may start on one archive at once. Two locks keep each from deleting or half-showing the folder
    another reads (no lock file is left: the archive and the folder holding it are the locks, as in
    ``core.diskspace``): the archive's, held while one job checks and unpacks; and the holding folder's, shared
    by every job reading a folder in it for as long as the job lives, which a job replacing a stale folder takes
    exclusively, so it waits for the jobs still reading the old one.
    """
    archive = Path(archive)
    folder = folder_of(archive)
    readers = _readers_lock(folder.parent)
    with open(archive, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # one check-and-unpack at a time; the next one finds the folder done
        if _is_unpacked_form(folder, archive):
            fcntl.flock(readers, fcntl.LOCK_SH)
            return folder
        # Not atomic_path: that clears other writers' temporaries. A killed job's copy is swept first; this one is
        # locked while it is filled (named by the archive's inode, whose lock this job holds).
        inode = os.fstat(handle.fileno()).st_ino
        sweep_stale_copies(archive, inode)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-{inode}-", dir=folder.parent))
        filling = os.open(tmp, os.O_RDONLY)
        fcntl.flock(filling, fcntl.LOCK_EX)
        try:
            with tarfile.open(archive) as tar:
                # PEP 706's filter, where this Python has it (3.11.4+; Debian backports it)
                tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            fcntl.flock(readers, fcntl.LOCK_EX)  # no job reads a folder here while it is replaced
            try:
                if not _is_unpacked_form(folder, archive):  # else a job holding another copy of the archive did it
                    shutil.rmtree(folder, ignore_errors=True)  # a folder from an older archive
                    os.replace(tmp, folder)
                    _mark(folder, archive)
            finally:
                fcntl.flock(readers, fcntl.LOCK_SH)  # this job reads it now
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            os.close(filling)
    return folder


# A copy being unpacked from another inode of the archive (one replaced while a job held the old) is locked by its
# job within moments of its creation: an unlocked one younger than this may still be about to be locked.
_YOUNG_S = 60


def sweep_stale_copies(archive: Path, inode: int) -> list[Path]:
    """Remove the partial copies of ``archive`` beside it that no live job fills (a job killed while unpacking:
    a model's size each); returns them. Called holding the lock of the archive's inode ``inode``, so a copy named
    by that inode is no live job's once its lock is free; one of another inode also once it is not young."""
    folder, removed = folder_of(archive), []
    for path in sorted(folder.parent.glob(f".{glob.escape(folder.name)}.tmp-*")):
        if not path.is_dir() or path.is_symlink():  # a packing job's temporary archive is a file (atomic_path)
            continue
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            ours = path.name.startswith(f".{folder.name}.tmp-{inode}-")
            if ours or time.time() - path.stat().st_mtime > _YOUNG_S:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        except (BlockingIOError, FileNotFoundError):
            pass  # a live job's, or gone
        finally:
            os.close(descriptor)
    return removed


# This process's descriptor of each folder holding archives it unpacked, by the folder's (device, inode): its
# shared lock lasts as long as the process (a job reads its model until it ends).
_READERS: dict[tuple[int, int], int] = {}


def _readers_lock(parent: Path) -> int:
    """A descriptor of ``parent`` to lock, one per folder per process (a second one would wait on the first)."""
    identity = (parent.stat().st_dev, parent.stat().st_ino)
    if identity not in _READERS:
        _READERS[identity] = os.open(parent, os.O_RDONLY)
    return _READERS[identity]


def discard_unpacked(archive: str | os.PathLike) -> None:
    """Remove the folder ``unpacked`` made beside ``archive`` (a temporary archive's folder outlives it otherwise)."""
    archive = Path(archive)
    shutil.rmtree(folder_of(archive), ignore_errors=True)
