"""Writing a shard's vectors: a background thread behind a bounded queue.

The extraction loop hands each window's vectors (layers x rows x dim, in the storage dtype) to
``ShardWriter.put`` and goes on with the next batch while the writer thread appends them to the HDF5
file. A block may be a CUDA copy still under way (the writer thread waits for it), or rows whose
buffer the extraction reuses once they are written (the writer hands it back). The file's chunk cache
holds every layer's open chunk, so each chunk is checksummed (fletcher32) and written once, whole,
never read back. A ``check`` of each block runs in the writer thread before it is written (the
extraction refuses non-finite values there, from each block's min and max, reduced before the block is
queued: the writer thread runs no torch operation, see ``HostBlock``). An error in the writer
thread (a full disk, a refused block) stops the extraction at its next ``put`` or at ``close`` with its
message. The file is written under a temporary name and
renamed only once complete (``contextuality.core.atomic``).
"""

from __future__ import annotations

import errno
import queue
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np

from contextuality.core.diskspace import ways_out
from contextuality.store.files import chunk_rows, create_checked, layer_name


class WriterError(RuntimeError):
    """The shard could not be written (the message names the file, and the bytes needed and free on a full disk)."""


class RefusedRows(RuntimeError):
    """Rows the writer's ``check`` refused: raised as they are (their message names the rows), not as a write failure."""


class ShardWriter:
    """Appends ``(layers, rows, dim)`` blocks to the ``layer_{LL}`` datasets of an open HDF5 file, in a thread."""

    def __init__(
        self,
        out: h5py.File,
        path: Path,
        n_layers: int,
        n_rows: int,
        dim: int,
        dtype: str,
        *,
        depth: int = 4,
        check=None,
    ):
        """``path``: the file's final name (for messages); ``out`` is open on its temporary name. ``check(block,
        rows, first_row)``: called with each block and its rows (numpy) before they are written; it may raise
        ``RefusedRows``."""
        self.path, self.n_rows, self.dim, self.dtype = Path(path), n_rows, dim, np.dtype(dtype)
        self.check = check
        self.needed = n_layers * n_rows * dim * self.dtype.itemsize
        self.datasets = [create_checked(out, layer_name(layer), (n_rows, dim), dtype) for layer in range(n_layers)]
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.written = 0
        self._thread = threading.Thread(target=self._run, name=f"writer {self.path.name}", daemon=True)
        self._thread.start()

    def put(self, block) -> None:
        """Queue the next rows of every layer (waits while the queue is full); raises the writer's error.

        ``block``: a (layers, rows, dim) array, a ``DeviceBlock`` (a copy from the GPU the writer thread
        waits for, while the forward passes go on) or a ``HostBlock`` (handed back once written).
        """
        self._raise()
        if block.shape[1]:
            while True:
                try:
                    self.queue.put(block, timeout=1.0)
                    return
                except queue.Full:
                    self._raise()

    def close(self) -> None:
        """Wait for the thread to write what is queued; raises its error, or if the rows do not add up."""
        if self._thread.is_alive():
            self.queue.put(None)
            self._thread.join()
        self._raise()
        if self.written != self.n_rows:
            raise WriterError(f"{self.path}: {self.written} rows written, {self.n_rows} expected")

    def _raise(self) -> None:
        if isinstance(self.error, RefusedRows):
            raise self.error
        if self.error is not None:
            raise _describe(self.error, self.path, self.needed, self.dtype.name) from self.error

    def _run(self) -> None:
        try:
            while (block := self.queue.get()) is not None:
                rows = block.resolve() if hasattr(block, "resolve") else block
                if self.check is not None:
                    self.check(block, rows, self.written)
                for dataset, layer_rows in zip(self.datasets, rows):
                    dataset[self.written : self.written + rows.shape[1]] = layer_rows
                self.written += rows.shape[1]
                if hasattr(block, "written"):
                    block.written()
        except BaseException as err:  # handed to the extraction loop, which stops with it
            self.error = err
            while True:  # unblock a producer waiting on a full queue
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break


class DeviceBlock:
    """Rows copied from a CUDA device into pinned host memory without blocking; ready once ``event`` is."""

    def __init__(self, host, event, bounds=None):
        """``bounds``: pinned host memory receiving the rows' (min, max), reduced on the device."""
        self.host, self.event, self.bounds, self.shape = host, event, bounds, tuple(host.shape)

    def resolve(self) -> np.ndarray:
        self.event.synchronize()
        return self.host.numpy()

    def extent(self) -> tuple[float, float]:
        """The rows' (min, max), NaN if any row holds a NaN (once ``resolve`` has returned)."""
        if self.bounds is None:
            return block_extent(self.host)
        return float(self.bounds[0]), float(self.bounds[1])


class HostBlock:
    """A window's rows in host memory (a tensor); ``release()`` once they are written (the extraction then
    reuses their buffer for a later window).

    ``bounds``: the rows' (min, max), reduced by the thread that made them (``block_extent``). The writer
    thread then runs no torch operation: one there starts a second OpenMP team beside the forward passes',
    and libgomp, seeing more threads than cores, then lets both teams spin less between parallel regions
    (each of the forward passes' parallel operations took 29-45 us instead of 24 on the idle 2-core machine).
    """

    def __init__(self, rows, release=None, bounds: tuple[float, float] | None = None):
        self.rows, self.shape, self.release, self.bounds = rows, tuple(rows.shape), release, bounds

    def resolve(self) -> np.ndarray:
        return self.rows.numpy()

    def extent(self) -> tuple[float, float]:
        return block_extent(self.rows) if self.bounds is None else self.bounds

    def written(self) -> None:
        if self.release is not None:
            self.release()


def block_extent(rows) -> tuple[float, float]:
    """(min, max) of a block of rows (a tensor or an array), NaN if any value is NaN: one reduction, as fast as a
    copy (torch's ``aminmax``; ``np.isfinite`` on float16 is 9x slower). An empty block: (0, 0)."""
    import torch

    rows = torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows
    if not rows.numel():
        return 0.0, 0.0
    low, high = torch.aminmax(rows)
    return float(low), float(high)


def chunk_cache_bytes(n_rows: int, dim: int, dtype: str) -> int:
    """A per-dataset chunk cache that holds two chunks: every layer's open chunk stays in memory."""
    return 2 * chunk_rows(n_rows) * dim * np.dtype(dtype).itemsize + (1 << 16)


def _describe(error: BaseException, path: Path, needed: int, dtype: str | None = None) -> WriterError:
    """One line for a writer failure; a full disk names the file, the bytes needed and the bytes free."""
    if isinstance(error, WriterError):
        return error
    text = str(error)
    if (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "errno = 28" in text or "No space left" in text:
        free = shutil.disk_usage(path.parent if path.parent.exists() else ".").free
        return DiskFullError(
            f"{path}: the disk filled up while writing it: it needs {needed:,} bytes and {free:,} are free; "
            f"nothing partial was kept ({ways_out(dtype)})"
        )
    return WriterError(f"{path}: writing failed: {type(error).__name__}: {text}")


class DiskFullError(WriterError):
    """The disk filled up mid-write."""
