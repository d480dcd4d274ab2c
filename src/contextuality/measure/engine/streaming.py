"""A layer measured within a memory budget (``metrics.memory_mb``), whatever its number of rows.

``plan_memory`` decides: a layer whose rows fit the budget in the compute dtype is read once, whole (the
in-memory path, unchanged); a larger one is read in chunks of whole sentences (``sentence_chunks``,
``read_chunk``), once per pass, and every quantity is built up chunk by chunk. The per-word statistics
need each word's occurrences together, so the first pass also writes the indexed occurrences, grouped by
word, to a scratch file in the stored dtype (``OccurrenceSpill``: exact, the values came from it), from
which groups of words are read back contiguously. Every pass and the spill are linear in the rows, so
time grows with N while memory stays within the budget.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from contextuality.core.diskspace import DiskSpaceError, free_bytes
from contextuality.measure.engine import backend

# The job's memory beside its blocks: interpreter, numpy, pandas and h5py, the occurrence index and the
# units table, the sampled sentences and geometry rows, the word batches (a default-run job measured
# 500 MB of RSS beyond its layer: 970 MB with a 475 MB MiniLM layer).
BASE_MB = 512
# d x d float64 matrices alive at once: the two moments, a length class's scatter, the covariance and its
# eigen-solve (abtt) and the variants' scatter matrices of a large word.
SQUARE_MATRICES = 8
# A chunk holds its rows in the compute dtype, a converted or centred copy and the temporaries of a
# block; a word group its rows and their centred copy.
CHUNK_COPIES = 3
GROUP_COPIES = 2
# The occurrence spill's name in the job's folder: .occurrences-XXXXXXXX.spill
SPILL_PREFIX, SPILL_SUFFIX = ".occurrences-", ".spill"


class MemoryPlan(NamedTuple):
    """How a layer is measured: ``whole`` (one read into memory), or chunks and word groups of at most so
    many rows."""

    whole: bool
    chunk_rows: int
    group_rows: int

    def describe(self) -> str:
        if self.whole:
            return "whole layer in memory"
        return f"in chunks of <= {self.chunk_rows} rows, word groups of <= {self.group_rows} occurrences"


def plan_memory(n_rows: int, d: int, work_itemsize: int, budget_mb: int) -> MemoryPlan:
    """The plan for a layer of ``n_rows`` x ``d`` measured in a dtype of ``work_itemsize`` bytes within
    ``budget_mb``. Refuses a budget that cannot hold even the fixed part (``BASE_MB`` and the d x d matrices)."""
    budget = budget_mb * 2**20
    fixed = BASE_MB * 2**20 + SQUARE_MATRICES * d * d * 8
    free = budget - fixed
    row_bytes = d * work_itemsize
    if free < 64 * row_bytes * CHUNK_COPIES:
        need = -(-(fixed + 2**20 * 64) // 2**20)
        raise ValueError(
            f"metrics.memory_mb: {budget_mb} MB cannot hold a {d}-dimensional layer's fixed part ({BASE_MB} MB plus "
            f"{SQUARE_MATRICES} {d} x {d} float64 matrices); set metrics.memory_mb to at least {need}"
        )
    if n_rows * row_bytes <= free:
        return MemoryPlan(True, n_rows, n_rows)
    return MemoryPlan(
        False, max(1, free // 2 // (row_bytes * CHUNK_COPIES)), max(1, free // 2 // (row_bytes * GROUP_COPIES))
    )


def bounded_ranges(bounds: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive item ranges [i0, i1) whose rows (item i spans ``bounds[i]:bounds[i + 1]``) add up to at most
    ``limit`` (a larger item alone): sentences into chunks, words into groups."""
    bounds = np.asarray(bounds, dtype=np.int64)
    n_items, ranges, i0 = len(bounds) - 1, [], 0
    while i0 < n_items:
        i1 = int(np.searchsorted(bounds, bounds[i0] + limit, side="right")) - 1
        i1 = min(max(i1, i0 + 1), n_items)
        ranges.append((i0, i1))
        i0 = i1
    return ranges


def sentence_chunks(offsets: np.ndarray, chunk_rows: int) -> list[tuple[int, int]]:
    """Consecutive sentence ranges [s0, s1) of at most ``chunk_rows`` rows each (a longer sentence alone)."""
    return bounded_ranges(offsets, chunk_rows)


class Chunk(NamedTuple):
    """Rows of whole sentences: the layer's rows [first_row, first_row + len(rows)), sentences [s0, s1)."""

    first_row: int
    rows: np.ndarray  # in the stored dtype (``read_chunks``); a tensor on a device (``device_job``)
    offsets: np.ndarray  # the sentences' offsets, from 0
    s0: int
    s1: int


def read_chunks(reader, offsets: np.ndarray, chunks: list[tuple[int, int]], dtype=None):
    """Each chunk of ``sentence_chunks`` read from a ``store.reader.LayerReader`` (checksums verified), in its
    stored dtype unless ``dtype``: the passes convert each block they take, and the spill keeps the stored
    values, so a float16 layer is never converted back."""
    offsets = np.asarray(offsets, dtype=np.int64)
    for s0, s1 in chunks:
        a, b = int(offsets[s0]), int(offsets[s1])
        yield Chunk(a, reader.rows(a, b, dtype=dtype), offsets[s0 : s1 + 1] - a, s0, s1)


def gather(rows_wanted: np.ndarray, chunk: Chunk, out: np.ndarray) -> None:
    """Copy the sorted layer rows ``rows_wanted`` that lie in ``chunk`` into their places in ``out`` (numpy,
    on the host: the chunk's rows may be on a device)."""
    lo, hi = np.searchsorted(rows_wanted, [chunk.first_row, chunk.first_row + chunk.rows.shape[0]])
    if hi > lo:
        out[lo:hi] = backend.to_host(backend.take_rows(chunk.rows, rows_wanted[lo:hi] - chunk.first_row))


class OccurrenceSpill:
    """The indexed occurrences, grouped by word, in a scratch file: written chunk by chunk (``add``), read
    back a group of words at a time (``read``). Rows keep the stored dtype, so nothing is rounded."""

    def __init__(self, occurrence_rows: np.ndarray, n_rows: int, d: int, stored_dtype, folder: str | Path | None):
        self.dtype, self.d = np.dtype(stored_dtype), d
        self.row_bytes = d * self.dtype.itemsize
        # position[r]: where layer row r goes in the word-grouped order (-1: not an indexed occurrence)
        self.position = np.full(n_rows, -1, dtype=np.int64)
        self.position[occurrence_rows] = np.arange(len(occurrence_rows))
        size = len(occurrence_rows) * self.row_bytes
        folder = Path(tempfile.gettempdir() if folder is None else folder)
        if free_bytes(folder) < size:
            raise DiskSpaceError(
                f"not enough disk in {folder} for this layer's occurrence spill: it needs {size / 1e9:.2f} GB and "
                f"{free_bytes(folder) / 1e9:.2f} GB are free; free space, or raise metrics.memory_mb so that the layer "
                "is measured in memory"
            )
        with _folder_lock(folder, fcntl.LOCK_SH):  # a sweep (sweep_stale_spills) sees it only once it is held
            self.file = tempfile.NamedTemporaryFile(prefix=SPILL_PREFIX, suffix=SPILL_SUFFIX, dir=folder)
            self.fd = self.file.fileno()
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # held while this job lives: a killed job's spill is free to sweep
        os.ftruncate(self.fd, size)

    def add(self, chunk: Chunk) -> None:
        """Write the chunk's occurrences to their places (one write per run of consecutive places)."""
        places = self.position[chunk.first_row : chunk.first_row + len(chunk.rows)]
        local = np.flatnonzero(places >= 0)
        if not len(local):
            return
        local = local[np.argsort(places[local], kind="stable")]
        values = np.ascontiguousarray(chunk.rows[local], dtype=self.dtype)
        sorted_places = places[local]
        breaks = np.flatnonzero(np.diff(sorted_places) != 1) + 1
        for a, b in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(local)]])):
            os.pwrite(self.fd, memoryview(values[a:b]).cast("B"), int(sorted_places[a]) * self.row_bytes)

    def read(self, first: int, last: int, dtype) -> np.ndarray:
        """Occurrences [first, last) of the word-grouped order, in ``dtype``."""
        out = np.empty((last - first, self.d), dtype=self.dtype)
        view, offset, done = memoryview(out).cast("B"), first * self.row_bytes, 0
        while done < len(view):  # pread may return less than asked
            got = os.preadv(self.fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"{self.file.name}: short read of the occurrence spill at byte {offset + done}")
            done += got
        return out if out.dtype == np.dtype(dtype) else out.astype(dtype)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> OccurrenceSpill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sweep_stale_spills(folder: str | Path) -> list[Path]:
    """Remove the occurrence spills in ``folder`` that no live job holds (a killed job's: hundreds of MB a
    layer); returns them. A layer job calls it when it starts: each spill is locked by its job while it lives."""
    folder, removed = Path(folder), []
    if not folder.is_dir():
        return removed
    with _folder_lock(folder, fcntl.LOCK_EX):
        for path in sorted(folder.glob(f"{SPILL_PREFIX}*{SPILL_SUFFIX}")):
            try:
                handle = open(path, "rb")
            except FileNotFoundError:
                continue
            with handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live job's
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


@contextmanager
def _folder_lock(folder: Path, kind: int):
    """The folder itself as a lock (no lock file is left, as in ``core.diskspace``)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, kind)
        yield
    finally:
        os.close(descriptor)


def word_groups(group_starts: np.ndarray, n_occurrences: int, group_rows: int) -> list[tuple[int, int]]:
    """Consecutive word ranges [w0, w1) whose occurrences add up to at most ``group_rows`` (a larger word alone)."""
    return bounded_ranges(np.append(np.asarray(group_starts, dtype=np.int64), n_occurrences), group_rows)
