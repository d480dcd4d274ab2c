"""Mutual k-nearest neighbours of two layers' rows (Huh et al. 2024, platonic-rep's ``mutual_knn``; spec
similarity-atlas 4.1), chunked over query rows: chunk x n similarities at a time, never n x n.

``knn_indices`` gives each row's k nearest rows by cosine of the variant's centred rows (``rows``),
itself excluded; ``mutual_knn`` the mean over rows of the share of neighbours two layers have in common.

Ties, and why the ranking is coarse. Cosines are computed in float64 and ranked at a resolution of 2^-24
(about 6e-8): cosines that round to the same step are tied, and a tie goes to the lower row index. Each
row's candidates get one integer key, (rounded cosine, then lower index first), all distinct, so the k
largest are one answer on either backend. The step makes the answer robust to the last bits in which two
BLAS libraries differ: a causal decoder gives every sentence that starts with the same word the same
first vector, and duplicate rows must tie exactly, not by the GEMM's rounding.

A zero row (a centred row equal to the layer's mean) has no direction: its unit row stays zero, so its
cosine with every row is 0. As a query its neighbours are therefore the lowest row indices (all tied); as
a candidate it sits at cosine 0 among the others' neighbours.
"""

from __future__ import annotations

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.similarity.rows import centred_chunks, check_layers, chunk_bounds, kept_rows, layer_centring

# Query rows x n similarities held at once (64 MiB in float64; the keys as much again).
KNN_BLOCK_ELEMENTS = 1 << 23
# Cosines are ranked in steps of 2^-24; ties go to the lower row index (the module's docstring says why).
STEPS_PER_UNIT = 2.0**24
# A rounded cosine's key leaves the low 32 bits for the row index (|cosine| * 2^24 < 2^31).
INDEX_BITS = 32
EXCLUDED = np.iinfo(np.int64).min


def unit_centred_rows(x, variant: str = "raw", keep=None, chunk_rows: int = 4096):
    """The variant's measured rows of ``x``, centred on their exact float64 mean, each at unit L2 norm (a zero
    row stays zero), as one float64 array of ``x``'s namespace and device (n_kept x d)."""
    rows = kept_rows(keep, x.shape[0], variant)
    centring = layer_centring(x, variant, rows, chunk_rows)
    xp = backend.namespace(x)
    parts = []
    for _, _, block, squared in centred_chunks(x, centring, chunk_rows, "float64"):
        norms = xp.sqrt(squared)
        parts.append(block / xp.where(norms > 0, norms, 1.0)[:, None])
    return xp.concat(parts, axis=0)


def ranking_keys(cosines, first_row: int):
    """Distinct int64 keys of a query chunk's cosines (rows ``first_row`` onwards against every row): the
    cosine rounded to 2^-24 in the high bits, the lower index winning in the low bits; the query's own row
    gets the smallest key."""
    xp = backend.namespace(cosines)
    chunk, n = cosines.shape
    lower_first = backend.like(np.iinfo(np.uint32).max - np.arange(n, dtype=np.int64), cosines)
    keys = xp.astype(xp.round(cosines * STEPS_PER_UNIT), xp.int64) * (1 << INDEX_BITS) + lower_first[None, :]
    local = np.arange(chunk)
    keys[backend.index(local, keys), backend.index(local + first_row, keys)] = EXCLUDED
    return keys


def knn_indices(x, k: int, *, variant: str = "raw", keep=None, chunk_rows: int = 4096) -> np.ndarray:
    """Each measured row's ``k`` nearest measured rows by cosine (``unit_centred_rows``), most similar first,
    itself excluded, ties to the lower index (the module's docstring), as positions among the measured rows
    (the rows where ``keep`` is True; all rows without it): n_kept x k, int64.

    ``chunk_rows`` query rows at a time, fewer when chunk x n would pass ``KNN_BLOCK_ELEMENTS``."""
    check_layers("x", [x])
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k: a positive number of neighbours; got {k!r}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows: at least 1; got {chunk_rows}")
    unit = unit_centred_rows(x, variant, keep, chunk_rows)
    n = unit.shape[0]
    if k > n - 1:
        raise ValueError(f"k: at most the measured rows less one ({n - 1}); got {k}")
    neighbours = np.empty((n, k), dtype=np.int64)
    for start, stop in chunk_bounds(n, max(1, min(chunk_rows, KNN_BLOCK_ELEMENTS // n))):
        keys = ranking_keys(unit[start:stop] @ unit.T, start)
        neighbours[start:stop] = backend.to_host(backend.top_k(keys, k))
    return neighbours


def mutual_knn(indices_a, indices_b) -> float:
    """The mean over rows of |N_A(i) & N_B(i)| / k: the share of each row's k neighbours (``knn_indices`` of
    two layers over the same rows) that both layers give it (Huh et al. 2024)."""
    a, b = np.asarray(indices_a), np.asarray(indices_b)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"indices_b: the shape of indices_a, {a.shape} (rows x k); got {b.shape}")
    shared = np.sum(a[:, :, None] == b[:, None, :], axis=(1, 2))
    return float(np.mean(shared) / a.shape[1])
