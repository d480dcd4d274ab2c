"""Static word embeddings in word2vec/GloVe text: read trimmed to a vocabulary, lower-cased and L2-normalised
(the protocol of ``contextuality.static.scoring``), and written (each layer's PC vectors, ``pcs/layer_LL.txt``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from contextuality.core.atomic import atomic_path


@dataclass(frozen=True, eq=False)
class StaticEmbedding:
    """Lower-cased words and their unit-norm vectors (row i belongs to ``words[i]``)."""

    words: list[str]
    vectors: np.ndarray
    index: dict[str, int]

    @classmethod
    def from_arrays(
        cls, words: Sequence[str], vectors: np.ndarray, vocabulary: Iterable[str] | None = None
    ) -> StaticEmbedding:
        """Apply the same trimming, lower-casing, collision rule and normalisation as the file reader."""
        vectors = np.asarray(vectors)
        chosen: dict[str, tuple[str, int]] = {}
        vocab = None if vocabulary is None else {w.lower() for w in vocabulary}
        for i, word in enumerate(words):
            _choose(chosen, word, i, vocab)
        return cls._build(list(chosen), vectors[[i for _, i in chosen.values()]])

    @classmethod
    def _build(cls, words: list[str], matrix: np.ndarray) -> StaticEmbedding:
        """L2-normalise the rows (zero rows stay zero) and index the words."""
        matrix = np.asarray(matrix, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        return cls(words=words, vectors=matrix, index={w: i for i, w in enumerate(words)})

    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return int(self.vectors.shape[1])

    @cached_property
    def mean_vector(self) -> np.ndarray:
        """Mean of the (normalised) vectors: the stand-in for out-of-vocabulary words."""
        if not len(self.words):
            raise ValueError("empty embedding: no word of the file is in the vocabulary")
        return self.vectors.mean(axis=0)

    def ids(self, words: Iterable[str]) -> np.ndarray:
        """Row of each word, -1 where it is out of vocabulary."""
        return np.fromiter((self.index.get(w, -1) for w in words), dtype=np.int64)

    def lookup(self, words: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``words`` (mean vector where unknown) and the in-vocabulary mask."""
        ids = self.ids(words)
        known = ids >= 0
        out = np.empty((len(ids), self.dim), dtype=self.vectors.dtype)
        out[known] = self.vectors[ids[known]]
        out[~known] = self.mean_vector
        return out, known


def _choose(chosen: dict[str, tuple[str, object]], word: str, payload: object, vocab: set[str] | None) -> None:
    """Keep ``payload`` under the lower-cased ``word`` if that key is in ``vocab``.

    Collision rule of the fork's ``load_embedding(lower=True)``: an original that already is
    lower-case wins, otherwise the first one seen stays.
    """
    key = word.lower()
    if vocab is not None and key not in vocab:
        return
    if key in chosen and (chosen[key][0] == key or word != key):
        return
    chosen[key] = (word, payload)


def _is_header(tokens: list[str]) -> bool:
    """A word2vec header line is ``<n_words> <dim>``."""
    return len(tokens) == 2 and all(t.isdigit() for t in tokens)


def load_embedding_text(path: str | os.PathLike, vocabulary: Iterable[str] | None = None) -> StaticEmbedding:
    """Read word2vec/GloVe text (header line optional), trimmed to ``vocabulary`` (every
    embedding scored on the same words).

    The file is streamed and only lines whose lower-cased word is in the vocabulary are parsed,
    so a multi-GB GloVe file needs little memory. Words may contain spaces (the vector is the
    last ``dim`` fields). Vectors are L2-normalised.
    """
    vocab = None if vocabulary is None else {w.lower() for w in vocabulary}
    chosen: dict[str, tuple[str, list[str]]] = {}
    dim = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip()
            if not line:
                continue
            if dim is None:
                tokens = line.split(" ")
                if lineno == 1 and _is_header(tokens):
                    dim = int(tokens[1])
                    continue
                dim = len(tokens) - 1
            if vocab is not None and line.split(" ", 1)[0].lower() not in vocab:
                continue
            parts = line.rsplit(" ", dim)
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{lineno}: expected a word and {dim} values")
            _choose(chosen, parts[0], parts[1:], vocab)
    if not chosen:
        return StaticEmbedding._build([], np.zeros((0, dim or 0), np.float32))
    matrix = np.array([values for _, values in chosen.values()], dtype=np.float32)
    return StaticEmbedding._build(list(chosen), matrix)


def write_embedding_text(path: str | os.PathLike, words: Sequence[str], matrix: np.ndarray) -> Path:
    """Write ``word v1 ... vd`` lines, no header (word2vec/GloVe text format), atomically.

    Six significant digits (relative error below 5e-6): the benchmarks compare cosines to three decimals.
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"need one row per word: {len(words)} words, matrix of shape {matrix.shape}")
    for word in words:
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"word {word!r} is empty or contains whitespace")
    path = Path(path)
    line_format = "%s" + " %.6g" * matrix.shape[1] + "\n"
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(line_format % (word, *row) for word, row in zip(words, matrix.tolist()))
    return path
