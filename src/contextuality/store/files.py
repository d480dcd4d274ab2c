"""HDF5 layout of the stored vectors: shard files hold the data, per-layer files are views over them.

* A **shard file** (``shards/shard_{s}.h5``, one extraction job) holds one dataset per layer
  (``layer_{LL}``, shape ``(n_rows, dim)``) for a contiguous block of sentences, plus
  ``sentence_offsets`` and ``sentence_ids``. These are the only copy of the vectors.
* A **layer file** (``layers/layer_{LL}.h5``) holds ``vectors`` as an HDF5 virtual dataset over the
  shards' ``layer_{LL}`` datasets (relative paths, so a moved or staged results folder still works),
  the gathered ``sentence_offsets`` and ``sentence_ids``, and the provenance attributes. It is a few
  kilobytes, so every layer is its own workflow output without storing the vectors twice.
* ``manifest.json`` (rule ``manifest``) lists the model's layers, rows, dims and shards: every reader
  checks what it reads against it.

Every dataset is chunked with HDF5's fletcher32 checksum, which every read verifies, so a flipped byte
stops the reading job naming the damaged file. Every file carries ``complete = 1`` only once fully
written, and is written under a temporary name first. HDF5 silently fills a virtual dataset's missing
source with its fill value; ``read_layer`` therefore reads each shard directly, after checking that it
exists, is complete and has the rows the layer file expects.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from contextuality.core.layout import layer_label

# Rows per HDF5 chunk: 1,024 rows of a 576-dim float16 layer are 1.2 MB, checksummed as one.
CHUNK_ROWS = 1024
# Elements read from HDF5 per slice while converting to another dtype (bounds the temporary copy, and keeps
# it in cache for the conversion).
READ_SLICE_ELEMENTS = 1 << 20
REBUILD_HINT = "delete it and rerun snakemake, which rebuilds it and everything that depends on it"


class StoreError(RuntimeError):
    """A stored file is missing, incomplete, damaged or inconsistent; the message names it."""


def open_complete(path: str | Path) -> h5py.File:
    """Open an HDF5 file for reading, refusing one that was not completely written."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: missing; rerun snakemake to rebuild it")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise StoreError(f"{path}: not a readable HDF5 file ({err}); {REBUILD_HINT}") from None
    if handle.attrs.get("complete") != 1:
        handle.close()
        raise StoreError(f"{path}: incomplete (no 'complete' marker); {REBUILD_HINT}")
    return handle


def layer_name(layer: int) -> str:
    """Name of a layer's dataset in a shard file (``layout.layer_label``'s digits, as the layer files' names)."""
    return f"layer_{layer_label(layer)}"


def chunk_rows(n_rows: int) -> int:
    """Rows per chunk: at most CHUNK_ROWS, balanced so the last chunk is nearly full.

    HDF5 stores a partial last chunk at full size; equal chunks waste fewer rows than chunks.
    """
    n_rows = max(1, n_rows)
    return -(-n_rows // -(-n_rows // CHUNK_ROWS))


def create_checked(h5: h5py.File | h5py.Group, name: str, shape: tuple[int, ...], dtype, data=None) -> h5py.Dataset:
    """A chunked dataset with HDF5's fletcher32 checksum on every chunk (verified on every read)."""
    chunks = (chunk_rows(shape[0]), *(max(1, size) for size in shape[1:]))
    # HDF5 chunks no empty fixed-size dataset (an empty shard): let it be extendible instead
    maxshape = (None, *shape[1:]) if shape[0] == 0 else None
    return h5.create_dataset(
        name, shape=shape, dtype=dtype, data=data, chunks=chunks, maxshape=maxshape, fletcher32=True
    )


def read_checked(dataset: h5py.Dataset, path: Path, selection=np.s_[...]) -> np.ndarray:
    try:
        return dataset[selection]
    except OSError as err:
        raise StoreError(
            f"{path}: dataset {dataset.name.lstrip('/')} fails its checksum or cannot be read ({err}): the file is "
            f"damaged; {REBUILD_HINT}"
        ) from None
