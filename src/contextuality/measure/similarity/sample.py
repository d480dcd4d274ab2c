"""Each model's rows of the similarity sample: the same word occurrences for every model (``join``),
gathered from every layer into ``sample.h5``, one dataset per layer, rows in draw order.

Two paths write the same sample: from the store (rule ``similarity_sample``: each layer file read once, in
chunks of rows, through ``LayerReader``'s checks against the manifest), or on the device (``measure_model``
gathers the rows of each resident layer, ``gather``, and writes one file per part, which
``similarity_sample`` joins). A word's pieces (a subword-indexed model) are pooled in float32 (``mean``, ``first``
or ``last``); a sample of single-piece words keeps the stored dtype. Every file records the rows' digest, the
provenance digest of what made the vectors, the pooling and ``complete``; ``read_sample`` checks them all.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from contextuality.core.atomic import atomic_path
from contextuality.core.digest import sha256_of
from contextuality.measure.engine import backend
from contextuality.measure.similarity import join as joined
from contextuality.store.files import StoreError, create_checked, layer_name, open_complete, read_checked

POOLINGS = ("mean", "first", "last")
# Rows read from a layer file at a time while gathering (about 64 MB of a 1,024-dim float32 layer)
READ_ROWS = 1 << 14


def sample_dtype(pieces: np.ndarray, stored_dtype: str) -> str:
    """float32 when any word pools several pieces, else the stored dtype (the rows as stored)."""
    return "float32" if pieces.size and int(pieces.max()) > 1 else stored_dtype


def gather(layer, first: np.ndarray, pieces: np.ndarray, pooling: str, dtype: str):
    """The sample's rows of one layer (``layer``: every stored row, numpy or torch): each word's pieces
    ``first .. first + pieces - 1`` pooled (``pooling``) in ``dtype``; the result in ``layer``'s namespace."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: {pooling!r}; allowed: {', '.join(POOLINGS)}")
    xp = backend.namespace(layer)
    if dtype == backend.dtype_name(layer.dtype) and (not pieces.size or int(pieces.max()) == 1):
        return backend.take_rows(layer, first)
    if pooling == "first":
        return xp.astype(backend.take_rows(layer, first), backend.dtype(xp, dtype))
    if pooling == "last":
        return xp.astype(backend.take_rows(layer, first + pieces - 1), backend.dtype(xp, dtype))
    # mean: every piece's row, summed per word in float32 (segments of consecutive rows), then divided
    word_of_piece = np.repeat(np.arange(len(first)), pieces)
    piece_rows = np.repeat(first, pieces) + (
        np.arange(len(word_of_piece)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    )
    rows = xp.astype(backend.take_rows(layer, piece_rows), backend.dtype(xp, dtype))
    sums = xp.zeros((len(first), rows.shape[1]), dtype=rows.dtype, **_on(layer))
    sums = _index_add(sums, backend.index(word_of_piece, layer), rows)
    return sums / backend.like(pieces.astype(dtype)[:, None], sums)


def _on(layer) -> dict:
    return {} if backend.is_numpy(backend.namespace(layer)) else {"device": backend.device(layer)}


def _index_add(target, index, rows):
    """``target[index[i]] += rows[i]`` for every i (np.add.at on the host, index_add_ on torch)."""
    if isinstance(target, np.ndarray):
        np.add.at(target, index, rows)
        return target
    return target.index_add_(0, index, rows)


def gather_from_store(reader, first: np.ndarray, pieces: np.ndarray, pooling: str, dtype: str) -> np.ndarray:
    """The sample's rows of one stored layer (``reader``: a ``LayerReader``), read in chunks of READ_ROWS rows:
    only the chunks holding a sampled piece, each once."""
    needed = np.unique(np.concatenate([first, first + pieces - 1])) if len(first) else np.empty(0, np.int64)
    out = np.empty((len(first), reader.shape[1]), dtype=np.dtype(dtype))
    if not len(first):
        return out
    # every piece of a word lies in the rows [first, first + pieces): read the span of each chunk that holds any
    lows, highs = first, first + pieces
    order = np.argsort(lows, kind="stable")
    for start in np.unique(needed // READ_ROWS) * READ_ROWS:
        stop = min(start + READ_ROWS, reader.shape[0])
        inside = order[(lows[order] >= start) & (lows[order] < stop)]
        if not len(inside):
            continue
        span_stop = int(max(stop, highs[inside].max()))
        block = reader.rows(int(start), span_stop)
        out[inside] = gather(block, lows[inside] - start, pieces[inside], pooling, dtype)
    return out


class SampleWriter:
    """``sample.h5`` written layer by layer (a layer's rows leave memory once written), under a temporary name
    renamed into place by ``finish``: ``layer_{LL}`` per layer, the attributes, then ``complete``. Datasets are
    chunked with checksums; ``contiguous`` (a sample of every common row, ``similarity.max_rows: null``) writes
    unchunked datasets, each with its sha256, which ``read_sample`` maps instead of holding them."""

    def __init__(self, path: Path, contiguous: bool = False):
        self.path, self.contiguous, self.layers = Path(path), contiguous, 0
        self._stack = contextlib.ExitStack()
        self.handle = h5py.File(self._stack.enter_context(atomic_path(self.path)), "w", track_order=True)

    def add(self, layer: int, rows) -> None:
        rows = np.ascontiguousarray(backend.to_host(rows))
        if self.contiguous:
            dataset = self.handle.create_dataset(layer_name(layer), data=rows)
            dataset.attrs["sha256"] = hashlib.sha256(rows.data).hexdigest()
        else:
            create_checked(self.handle, layer_name(layer), rows.shape, rows.dtype, data=rows)
        self.layers += 1

    def finish(self, attrs: dict) -> None:
        for key, value in attrs.items():
            self.handle.attrs[key] = value
        self.handle.attrs["n_layers_in_file"] = self.layers
        self.handle.attrs["complete"] = 1
        self.handle.close()
        self._stack.close()  # renames the finished file into place


def write_sample(path: Path, layers: dict[int, np.ndarray], attrs: dict) -> None:
    """A whole sample at once (``SampleWriter``)."""
    writer = SampleWriter(path)
    for layer, rows in sorted(layers.items()):
        writer.add(layer, rows)
    writer.finish(attrs)


def _mapped(dataset, path: Path) -> np.ndarray:
    """An unchunked dataset as a read-only map of the file (the OS pages it in as chunks are read), after checking
    its sha256 block by block."""
    mapped = np.memmap(path, dtype=dataset.dtype, mode="r", offset=dataset.id.get_offset(), shape=dataset.shape)
    digest, flat = hashlib.sha256(), mapped.reshape(-1)
    for start in range(0, flat.size, 1 << 24):
        digest.update(flat[start : start + (1 << 24)].data)
    if digest.hexdigest() != dataset.attrs.get("sha256"):
        raise StoreError(f"{path}: dataset {dataset.name.lstrip('/')} does not match its sha256 (the file is damaged); "
                         "delete it and rerun snakemake to gather the sample again")  # fmt: skip
    return mapped


def read_sample(path: str | Path, *, model: str, rows_digest: str, n_rows: int, layers=None) -> tuple[list, dict]:
    """Every layer of a model's sample (or ``layers``), in layer order, and its attributes, after checking that
    it is complete, the model's, gathered from the rows of ``rows_digest`` and holds ``n_rows`` rows each."""
    with open_complete(path) as handle:
        attrs = {key: (value.item() if hasattr(value, "item") else value) for key, value in handle.attrs.items()}
        problem = _sample_problem(handle, attrs, model=model, rows_digest=rows_digest, n_rows=n_rows)
        if problem:
            raise StoreError(f"{path}: {problem}; delete it and rerun snakemake to gather the sample again")
        names = sorted(name for name in handle if name.startswith("layer_"))
        chosen = names if layers is None else [layer_name(layer) for layer in layers]
        return [_read(handle[name], Path(path)) for name in chosen], attrs


def _read(dataset, path: Path) -> np.ndarray:
    """A layer of the sample: held (chunked, each chunk's checksum verified), or mapped (unchunked)."""
    return _mapped(dataset, path) if dataset.chunks is None else read_checked(dataset, path)


def _sample_problem(handle, attrs: dict, *, model: str, rows_digest: str, n_rows: int) -> str | None:
    if attrs.get("model") != model:
        return f"is the sample of model {attrs.get('model')!r}, not of {model!r}"
    if attrs.get("rows_sha256") != rows_digest:
        return (f"was gathered from other rows (rows_sha256 {str(attrs.get('rows_sha256'))[:12]}...) than this run's "
                f"rows.parquet ({rows_digest[:12]}...): the models' rows would not be the same occurrences")  # fmt: skip
    names = sorted(name for name in handle if name.startswith("layer_"))
    if names != [layer_name(layer) for layer in range(int(attrs.get("n_layers", -1)))]:
        return f"holds {len(names)} layer datasets, but the model has {attrs.get('n_layers')} layers"
    shapes = {handle[name].shape[0] for name in names}
    if shapes != {n_rows}:
        return f"holds {sorted(shapes)} rows per layer, but the sample has {n_rows}"
    return None


@dataclass(frozen=True)
class SampleRequest:
    """The similarity sample this job gathers from each resident layer (``similarity_sample``'s rows of the
    part's layers): each word's first stored row and piece count in draw order, its pooling and dtype."""

    first: np.ndarray
    pieces: np.ndarray
    pooling: str
    dtype: str
    rows_path: Path
    out: Path
    writer: list = field(default_factory=list)  # the open SampleWriter, once the first layer is added

    @classmethod
    def of(cls, rows_path: Path, model: str, pooling: str, max_rows: int | None, stored_dtype: str, out: Path):
        rows = joined.read_rows(rows_path, [model])
        first, pieces = joined.sample_rows(rows, model, joined.sample_size(len(rows), max_rows))
        return cls(first, pieces, pooling, sample_dtype(pieces, stored_dtype), Path(rows_path), Path(out))

    def add(self, layer: int, resident_layer):
        """The sample's rows of one resident layer, written at once (the file is opened at the first layer); returns
        them."""
        if len(self.first) and int((self.first + self.pieces).max()) > resident_layer.shape[0]:
            raise StoreError(f"{self.rows_path}: names rows beyond the {resident_layer.shape[0]} this job's plan stores "
                             "(made from another plan); delete it and rerun snakemake")  # fmt: skip
        rows = gather(resident_layer, self.first, self.pieces, self.pooling, self.dtype)
        self.add_gathered(layer, rows)
        return rows

    def add_gathered(self, layer: int, rows) -> None:
        """One layer's sample rows, as ``add`` gathered them (or an earlier job of the part kept them)."""
        if not self.writer:
            self.writer.append(SampleWriter(self.out))
        self.writer[0].add(layer, rows)

    def finish(self, *, model: str, n_layers: int, provenance_sha256: str) -> None:
        writer = self.writer[0] if self.writer else SampleWriter(self.out)  # a part without layers: an empty sample
        writer.finish({"model": model, "n_layers": n_layers, "rows_sha256": sha256_of(self.rows_path),
                       "provenance_sha256": provenance_sha256, "pooling": self.pooling, "n_rows": len(self.first)})  # fmt: skip
