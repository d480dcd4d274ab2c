"""Writing a shard's vectors: a background thread behind a bounded queue, whole chunks at a time.

The extraction loop hands each window's vectors (layers x rows x dim, already in the storage dtype)
to ``ShardWriter.put`` and goes on with the next batch while the writer thread appends them to the
HDF5 file. Rows are buffered until a whole chunk (``store.CHUNK_ROWS``) of every layer is ready, so
each chunk is written once, whole: no chunk is read back, and its fletcher32 checksum is computed
once. An error in the writer thread (a full disk, say) stops the extraction at its next ``put`` or at
``close`` with the writer's message. The file is written under a temporary name and renamed only once
complete (``contextuality.atomic``).
"""

from __future__ import annotations

import errno
import queue
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np

from contextuality.store import CHUNK_ROWS, create_checked, layer_name


class WriterError(RuntimeError):
    """The shard could not be written (the message names the file, and the bytes needed and free on a full disk)."""


class ShardWriter:
    """Appends ``(layers, rows, dim)`` blocks to the ``layer_{LL}`` datasets of an open HDF5 file, in a thread."""

    def __init__(self, out: h5py.File, path: Path, n_layers: int, n_rows: int, dim: int, dtype: str, *, depth: int = 4):
        """``path``: the file's final name (for messages); ``out`` is open on its temporary name."""
        self.path, self.n_rows, self.dim, self.dtype = Path(path), n_rows, dim, np.dtype(dtype)
        self.needed = n_layers * n_rows * dim * self.dtype.itemsize
        self.datasets = [create_checked(out, layer_name(layer), (n_rows, dim), dtype) for layer in range(n_layers)]
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.written = 0
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._thread = threading.Thread(target=self._run, name=f"writer {self.path.name}", daemon=True)
        self._thread.start()

    def put(self, block) -> None:
        """Queue the next rows of every layer (waits while the queue is full); raises the writer's error.

        ``block``: a (layers, rows, dim) array, or a (host tensor, CUDA event) pair whose copy the
        writer thread waits for (so the forward passes go on meanwhile).
        """
        self._raise()
        if (block[0] if isinstance(block, tuple) else block).shape[1]:
            while True:
                try:
                    self.queue.put(block, timeout=1.0)
                    return
                except queue.Full:
                    self._raise()

    def close(self) -> None:
        """Flush what is left and wait for the thread; raises its error, or if the rows do not add up."""
        if self._thread.is_alive():
            self.queue.put(None)
            self._thread.join()
        self._raise()
        if self.written != self.n_rows:
            raise WriterError(f"{self.path}: {self.written} rows written, {self.n_rows} expected")

    def _raise(self) -> None:
        if self.error is not None:
            raise _describe(self.error, self.path, self.needed) from self.error

    def _run(self) -> None:
        try:
            while (block := self.queue.get()) is not None:
                if isinstance(block, tuple):  # a device-to-host copy in flight
                    tensor, copied = block
                    copied.synchronize()
                    block = tensor.numpy()
                self._pending.append(block)
                self._pending_rows += block.shape[1]
                if self._pending_rows >= CHUNK_ROWS:
                    self._flush(final=False)
            self._flush(final=True)
        except BaseException as err:  # handed to the extraction loop, which stops with it
            self.error = err
            while True:  # unblock a producer waiting on a full queue
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break

    def _flush(self, final: bool) -> None:
        if not self._pending_rows:
            return
        rows = np.concatenate(self._pending, axis=1) if len(self._pending) > 1 else self._pending[0]
        whole = self._pending_rows if final else self._pending_rows // CHUNK_ROWS * CHUNK_ROWS
        for dataset, layer_rows in zip(self.datasets, rows):
            dataset[self.written:self.written + whole] = layer_rows[:whole]
        self.written += whole
        rest = rows[:, whole:]
        self._pending, self._pending_rows = ([rest] if rest.shape[1] else []), rest.shape[1]


def _describe(error: BaseException, path: Path, needed: int) -> WriterError:
    """One line for a writer failure; a full disk names the file, the bytes needed and the bytes free."""
    if isinstance(error, WriterError):
        return error
    text = str(error)
    if (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "errno = 28" in text or "No space left" in text:
        free = shutil.disk_usage(path.parent if path.parent.exists() else ".").free
        return DiskFullError(
            f"{path}: the disk filled up while writing it: it needs {needed:,} bytes and {free:,} are free; "
            "nothing partial was kept (free space, or use storage_dtype float16)"
        )
    return WriterError(f"{path}: writing failed: {type(error).__name__}: {text}")


class DiskFullError(WriterError):
    """The disk filled up mid-write."""
