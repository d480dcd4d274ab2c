"""Intra-sentence similarity of every sentence of a chunk, on the rows' own backend (``backend``).

A sentence's value is final within the chunk that holds it (a chunk always holds whole sentences), so it
streams: sentences of one length are stacked (s, L, d) and measured together in float64. The definition
is ``reference.intra_sentence_similarity``'s (Definition 2): the mean over the sentence's rows of
cos(row, sentence mean), the mean over all of its stored rows, zero rows (no direction) left out.
"""

from __future__ import annotations

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.engine.layer_pass import _length_classes
from contextuality.measure.engine.transforms import Transform

# Rows per stacked block of one length (float64: 16 MiB at d = 1024).
BLOCK_ROWS = 2048


def _unit(Y):
    xp = backend.namespace(Y)
    norms = xp.linalg.vector_norm(Y, axis=-1, keepdims=True)
    return Y / xp.where(norms > 0, norms, 1.0), norms[..., 0] > 0


def intra_sentence_by_length(X, offsets: np.ndarray, transform: Transform | None = None) -> np.ndarray:
    """Intra-sentence similarity of each sentence of ``X`` (rows of whole sentences, ``offsets`` from 0), of
    the ``transform``ed rows if given; NaN for a sentence without rows. A numpy array on the host."""
    xp = backend.namespace(X)
    offsets = np.asarray(offsets, dtype=np.int64)
    values = np.full(len(offsets) - 1, np.nan)
    d = X.shape[1]
    for length, ids in _length_classes(offsets):
        per_block = max(1, BLOCK_ROWS // length)
        for a in range(0, len(ids), per_block):
            chunk = ids[a : a + per_block]
            rows = (offsets[chunk][:, None] + np.arange(length)).reshape(-1)
            Y = xp.astype(backend.take_rows(X, rows), xp.float64)
            if transform is not None and not transform.identity:
                Y = transform.rows(Y, xp.float64)
            Y = xp.reshape(Y, (len(chunk), length, d))
            units, nonzero = _unit(Y)
            mean_units, mean_nonzero = _unit(xp.sum(Y, axis=1) / length)
            usable = xp.astype(nonzero & mean_nonzero[:, None], xp.float64)
            cosines = xp.sum(units * mean_units[:, None, :], axis=-1)
            with backend.quiet():
                values[chunk] = backend.to_host(xp.sum(cosines * usable, axis=1) / xp.sum(usable, axis=1))
    return values
