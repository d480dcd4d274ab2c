"""One layer's rows for the one measurement path (``layer_job.measure_rows``), and the occurrences' index.

``LayerRows`` gives a layer's rows as chunks of whole sentences, once per pass: ``RowsInMemory`` a layer held
whole (numpy on the host, or a tensor on a device: one chunk), ``RowsInChunks`` a layer file read in chunks
within ``metrics.memory_mb`` (its occurrences spilled to a scratch file, ``streaming``). ``OccurrenceIndex``
groups the rows by word.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from tqdm import tqdm

from contextuality.measure.engine import backend
from contextuality.measure.engine.layer_pass import BLOCK_ROWS
from contextuality.measure.engine.streaming import (
    Chunk,
    MemoryPlan,
    OccurrenceSpill,
    read_chunks,
    sentence_chunks,
)  # fmt: skip
from contextuality.measure.reference.word_pcs import group_sizes


class OccurrenceIndex:
    """The occurrences of one model as the measures need them: rows grouped by word (sorted by word, row)."""

    def __init__(self, occurrences: pd.DataFrame):
        occurrences = occurrences.sort_values(["word", "row"], kind="stable")
        self._set(occurrences["word"].to_numpy(), occurrences["row"].to_numpy(dtype=np.int64))

    def _set(self, word_of_row: np.ndarray, rows: np.ndarray) -> None:
        self.rows = rows
        self.group_starts = np.flatnonzero(np.concatenate([[len(self.rows) > 0], word_of_row[1:] != word_of_row[:-1]]))
        self.words = word_of_row[self.group_starts]
        self.counts = group_sizes(self.group_starts, len(self.rows))

    @classmethod
    def from_parquet(cls, path: str | Path) -> OccurrenceIndex:
        """From occurrences.parquet: only its word and row columns, each word's text held once (a dictionary),
        not once per occurrence, so that the index costs about 16 bytes per occurrence; the same index as
        ``OccurrenceIndex(pd.read_parquet(path))``."""
        table = pq.read_table(path, columns=["word", "row"], read_dictionary=["word"])
        words = table.column("word").combine_chunks()
        texts = np.asarray(words.dictionary.to_pylist(), dtype=object)
        rank = np.empty(len(texts), dtype=np.int64)
        rank[np.argsort(texts, kind="stable")] = np.arange(len(texts))  # a word's place in text order
        keys = rank[words.indices.to_numpy(zero_copy_only=False)]
        rows = table.column("row").to_numpy().astype(np.int64)
        del table, words
        order = np.lexsort((rows, keys))  # by word, then row: sort_values(["word", "row"])
        index = cls.__new__(cls)
        keys, rows = keys[order], rows[order]
        index._set(keys, rows)
        index.words = texts[np.argsort(rank)][index.words]  # ranks back to the texts
        return index


class LayerRows(ABC):
    """Where one layer's rows come from, for the one measurement path (``measure_rows``).

    ``passes()`` gives every row once per call, in chunks of whole sentences (``streaming.Chunk``), as
    arrays of one backend (``backend``: numpy on the host, torch on a device). ``keep`` sees each chunk
    of the first pass (a layer read in chunks spills its occurrences); ``word_rows`` then gives a range
    of the word-grouped occurrences: an array and the positions of the range's rows in it.
    """

    path: Path  # the layer file, or what the rows are (messages)
    n_rows: int
    d: int
    stored_dtype: str  # the format the vectors are stored in (its rounding: the degenerate tolerance)
    offsets: np.ndarray
    after_final_norm: int
    block_rows: int = BLOCK_ROWS  # rows per block of the full-layer passes
    sentence_ids: np.ndarray | None = None  # corpus ids of the sentences (messages), when not in ``path``
    remedy: str | None = None  # the way out of a non-finite row (``finite.non_finite_error``'s when None)

    @abstractmethod
    def passes(self, desc: str | None = None):
        """Every row once, in chunks of whole sentences."""

    @abstractmethod
    def first_rows(self, count: int):
        """The layer's first ``count`` rows, as one array of the backend."""

    def keep(self, chunk: Chunk) -> None:  # noqa: B027 (a default: most rows are not read again)
        """See a chunk of the first pass (nothing to do unless the rows are read again from a spill)."""

    @abstractmethod
    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        """Words ``first``..``last`` of ``index``: their occurrences' rows and the positions in that array."""

    def close(self) -> None:  # noqa: B027 (a default: most rows hold nothing to let go)
        """Let go of what the rows hold (a spill file)."""


class RowsInMemory(LayerRows):
    """A layer held whole (numpy on the host, or a tensor on a device): one chunk, gathers by index."""

    def __init__(self, X, offsets: np.ndarray, *, path, stored_dtype, after_final_norm: int = 0,
                 block_rows: int = BLOCK_ROWS, sentence_ids: np.ndarray | None = None, remedy: str | None = None):  # fmt: skip
        self.X, self.path, self.offsets = X, Path(path), np.asarray(offsets, dtype=np.int64)
        self.n_rows, self.d = int(X.shape[0]), int(X.shape[1])
        self.stored_dtype, self.after_final_norm = backend.dtype_name(stored_dtype), after_final_norm
        self.block_rows, self.sentence_ids, self.remedy = block_rows, sentence_ids, remedy

    def passes(self, desc: str | None = None):
        yield Chunk(0, self.X, self.offsets, 0, len(self.offsets) - 1)

    def first_rows(self, count: int):
        return self.X[:count, :]

    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        return self.X, index.rows[first:last]


class RowsInChunks(LayerRows):
    """A layer file read in chunks of whole sentences, once per pass, its occurrences spilled word by word to
    a scratch file in the first pass (``streaming``): memory within the budget whatever the layer's size."""

    def __init__(self, reader, plan: MemoryPlan, index: OccurrenceIndex, *, path, after_final_norm: int, scratch):
        self.reader, self.path, self.offsets = reader, Path(path), reader.offsets
        self.n_rows, self.d = (int(v) for v in reader.shape)
        self.stored_dtype, self.after_final_norm = backend.dtype_name(reader.dtype), after_final_norm
        self.chunks = sentence_chunks(self.offsets, plan.chunk_rows)
        self.spill = OccurrenceSpill(index.rows, self.n_rows, self.d, reader.dtype, scratch)
        self.spill_group_rows = plan.group_rows

    def passes(self, desc: str | None = None):  # in the stored dtype: every block a pass takes is converted as taken
        chunks = read_chunks(self.reader, self.offsets, self.chunks)
        yield from tqdm(chunks, total=len(self.chunks), desc=desc, disable=None if desc else True, leave=False)

    def first_rows(self, count: int):
        """The layer's first rows (the point its moments are taken around)."""
        return self.reader.rows(0, min(count, self.n_rows))

    def keep(self, chunk: Chunk) -> None:  # noqa: B027 (a default: most rows are not read again)
        self.spill.add(chunk)

    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        return self.spill.read(first, last, self.spill.dtype), np.arange(last - first)

    def close(self) -> None:  # noqa: B027 (a default: most rows hold nothing to let go)
        self.spill.close()
