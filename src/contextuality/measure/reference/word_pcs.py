"""Per-word principal-component statistics and degenerate words (MEV, the word's PCs), as pure float64 functions.

The MEV variants and first singular vector of each word (``pc_stats_by_word``; one word:
``word_pc_stats``), and which words are *degenerate* (``degenerate_words``: their occurrence vectors
identical up to the rounding of their storage format, so that their MEV is 0/0). Every function takes
numpy arrays (any float dtype, float16 included) and computes in float64; nothing reads or writes
files. Words are handled many at a time: an occurrence matrix holds the rows of several words one
after another, and ``group_starts`` gives the first row of each word's block (the convention of
``np.add.reduceat``).

Principal components are always taken from explicitly centred rows (``X - mean`` before any Gram or
scatter matrix is formed), never through rank-one corrections such as ``X^T X - n mean mean^T``: word
vectors of large language models have norms of 100-2000 and, for near-duplicate contexts, a spread a
million times smaller, where the correction cancels catastrophically. ``top_eigenpair`` (one
symmetric matrix: ARPACK or LAPACK) also serves the exact baselines and the engine.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

# A word is *degenerate* when its occurrence vectors are identical up to the rounding of the format they
# were stored in (duplicate sentences; identical left contexts in a decoder): their spread is rounding
# noise, MEV is 0/0 up to that noise, and every MEV variant is NaN for it (``degenerate_words``). In a
# format with machine epsilon eps, two roundings of one value differ by at most one unit in the last
# place, ulp(x_k) <= eps |x_k|, and a component taking two values that far apart has variance at most
# ulp**2 / 4: copies of one vector that disagree by rounding in any or all components have a total
# variance of at most eps**2 / 4 times their squared norm. The tolerance is eps**2, four times that, with
# eps of the coarsest format that holds every value exactly (``storage_epsilon``): 2**-20 = 9.5e-7 for
# float16 storage (vectors closer than that differ by under 0.1% of their norm, below float16's
# resolution), 2**-46 = 1.4e-14 for float32, and this floor for float64, whose arithmetic alone leaves a
# relative variance near 1e-32 on identical rows.
DEGENERATE_FLOOR = 1e-20
# Storage formats whose rounding a degenerate word may show, coarsest first, with their machine epsilon.
STORAGE_EPSILON = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}
# Words with at most this many occurrences are solved together, one stacked eigendecomposition per size.
BATCHED_MAX_OCCURRENCES = 48
# Symmetric matrices larger than this get their top eigenpair by Lanczos iteration, not LAPACK.
LANCZOS_MIN_SIZE = 160
# Upper bound on the float64 elements of one stacked batch (64 MiB).
BATCH_ELEMENTS = 1 << 23


class PCStats(NamedTuple):
    """First-principal-component statistics of occurrence matrices (one entry per word).

    The three MEV variants are NaN for degenerate words (``degenerate_words``); the first vector is
    still given for them (it is their common direction).
    """

    mev: np.ndarray  # the paper's MEV: sklearn TruncatedSVD explained_variance_ratio_[0]
    mev_literal: np.ndarray  # sigma_1^2 / sum sigma_i^2 of the uncentred matrix (the paper's formula)
    mev_centered: np.ndarray  # first explained variance ratio of centred PCA
    first_vector: np.ndarray  # uncentred top right singular vector, unit norm, sign along the mean


def group_sizes(group_starts: np.ndarray, n_rows: int) -> np.ndarray:
    """Number of rows in each block given the blocks' start rows."""
    return np.diff(np.append(np.asarray(group_starts, dtype=np.int64), n_rows))


def top_eigenpair(S: np.ndarray, start: np.ndarray) -> tuple[float, np.ndarray]:
    """Largest eigenvalue and its unit eigenvector of a symmetric positive semi-definite matrix.

    Large matrices use Lanczos iteration (ARPACK, to machine precision) from the deterministic vector
    ``start``: only one eigenpair is needed, and it converges in a few dozen products. Small ones, and
    any case Lanczos cannot settle, use LAPACK's selected-eigenvalue driver.
    """
    m = len(S)
    if m > LANCZOS_MIN_SIZE and np.any(start):
        try:
            values, vectors = scipy.sparse.linalg.eigsh(S, k=1, which="LA", v0=start, tol=0)
            return float(values[0]), vectors[:, 0]
        except scipy.sparse.linalg.ArpackError:
            pass
    values, vectors = scipy.linalg.eigh(S, subset_by_index=[m - 1, m - 1], check_finite=False)
    return float(values[0]), vectors[:, 0]


def lanczos_start(m: int) -> np.ndarray:
    """A fixed, generic start vector (not orthogonal to any particular eigenvector)."""
    return np.random.default_rng(m).standard_normal(m)


def _finish(centred, v1, sigma1_sq, centred_top, total_sq, total_var, mean):
    """MEV variants of stacked words from their spectra; shapes (k, n, d), (k, d) and (k,).

    ``centred`` holds the explicitly centred rows: the variance along v1 is taken from them, not from
    the uncentred projections (whose common offset would swamp it for near-duplicate vectors).
    Degenerate words are not masked here (see ``pc_stats_by_word``).
    """
    v1 = v1 / np.linalg.norm(v1, axis=-1, keepdims=True)
    v1 = v1 * np.where(np.einsum("kd,kd->k", v1, mean) < 0, -1.0, 1.0)[:, None]
    projections = np.einsum("knd,kd->kn", centred, v1)
    projected_var = np.einsum("kn,kn->k", projections, projections) / centred.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        mev = np.minimum(projected_var / total_var, 1.0)
        mev_centered = np.minimum(centred_top / (total_var * centred.shape[1]), 1.0)
        mev_literal = np.minimum(sigma1_sq / total_sq, 1.0)
    return PCStats(mev, mev_literal, mev_centered, v1)


def _stacked_variances(X: np.ndarray):
    """Means (k, d), explicitly centred rows (k, n, d), total centred variance and mean squared norm (k,).

    ``X`` holds k words with n occurrences each, (k, n, d) in float64. total_var = (1/n) sum_i
    |x_i - mean|^2 and mean_sq = (1/n) sum_i |x_i|^2.
    """
    n = X.shape[1]
    mean = X.mean(axis=1)
    centred = X - mean[:, None, :]
    return mean, centred, np.einsum("knd,knd->k", centred, centred) / n, np.einsum("knd,knd->k", X, X) / n


def _gram_from_centred(centred_gram: np.ndarray, centred: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """X X^T of stacked words from the centred Gram matrix C C^T: (c_i + m).(c_j + m), no cancellation."""
    a = np.einsum("...nd,...d->...n", centred, mean)
    return centred_gram + a[..., :, None] + a[..., None, :] + np.einsum("...d,...d->...", mean, mean)[..., None, None]


def _pc_stats_stacked(X, mean, centred, total_var, mean_sq) -> PCStats:
    """PC statistics of k words with the same number n of occurrences, X of shape (k, n, d), n <= d.

    Works on the n x n Gram matrices: the top eigenpair (lambda, u) of X X^T gives sigma_1^2 = lambda
    and v_1 = X^T u / sigma_1; the Gram matrix of the explicitly centred rows gives the centred PCA
    spectrum, and X X^T follows from it by adding the mean's terms. The other arguments come from
    ``_stacked_variances(X)``.
    """
    centred_gram = centred @ centred.transpose(0, 2, 1)
    values, vectors = np.linalg.eigh(_gram_from_centred(centred_gram, centred, mean))
    centred_top = np.linalg.eigvalsh(centred_gram)[:, -1]
    v1 = np.einsum("knd,kn->kd", X, vectors[:, :, -1])
    total_sq = mean_sq * X.shape[1]
    return _finish(centred, v1, np.maximum(values[:, -1], 0.0), np.maximum(centred_top, 0.0), total_sq, total_var, mean)


def _word_pc_stats_raw(X, mean, centred, total_var, mean_sq, with_centred: bool = True) -> PCStats:
    """PC statistics of one word, X (n, d) in float64, degenerate words not masked (length-1 arrays).

    Works on the smaller of the Gram matrix (n <= d) and the scatter matrix (n > d), both formed from
    the explicitly centred rows C = X - mean: the centred matrix is C C^T (or C^T C), and the uncentred
    one adds the mean's terms to it (for n > d: C^T C + n mean mean^T, a sum of positive semi-definite
    terms), so one matrix product serves both. ``with_centred=False`` skips the centred spectrum (NaN).
    The other arguments are ``_stacked_variances(X[None])`` without the leading axis.
    """
    n, d = X.shape
    centred_top = float("nan")
    if n <= d:
        centred_gram = centred @ centred.T
        gram = _gram_from_centred(centred_gram, centred, mean)
        sigma1_sq, u1 = top_eigenpair(gram, gram.sum(axis=1))  # X X^T 1 = X mean * n: near the top vector
        v1 = u1 @ X
        if with_centred:
            centred_top, _ = top_eigenpair(centred_gram, lanczos_start(n))
    else:
        centred_scatter = centred.T @ centred
        sigma1_sq, v1 = top_eigenpair(centred_scatter + n * np.outer(mean, mean), mean)
        if with_centred:
            centred_top, _ = top_eigenpair(centred_scatter, lanczos_start(d))
    return _finish(
        centred[None], v1[None], np.array([max(sigma1_sq, 0.0)]), np.array([max(centred_top, 0.0)]),
        np.array([mean_sq * n]), np.array([total_var]), mean[None],
    )  # fmt: skip


def _word_batches(X: np.ndarray, group_starts: np.ndarray, sizes: np.ndarray):
    """The word blocks of X as ``pc_stats_by_word`` solves them: (word indices, float64 rows (k, n, d)).

    Words with at most min(BATCHED_MAX_OCCURRENCES, d) occurrences come stacked by size, in batches
    of about ``BATCH_ELEMENTS`` elements; the others one at a time (k = 1). Words without rows are
    skipped.
    """
    d = X.shape[1]
    limit = min(BATCHED_MAX_OCCURRENCES, d)
    for size in np.unique(sizes[(sizes > 0) & (sizes <= limit)]):
        words = np.flatnonzero(sizes == size)
        per_batch = max(1, BATCH_ELEMENTS // (size * d))
        for batch in np.array_split(words, -(-len(words) // per_batch)):
            yield batch, np.asarray(X[group_starts[batch, None] + np.arange(size)], dtype=np.float64)
    for word in np.flatnonzero(sizes > limit):
        start = group_starts[word]
        yield np.array([word]), np.asarray(X[start : start + sizes[word]], dtype=np.float64)[None]


def word_variances(X: np.ndarray, group_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Total centred variance and mean squared norm of each word block, in float64.

    total_var = (1/n) sum_i |x_i - mean|^2 (from explicitly centred rows), mean_sq = (1/n) sum_i |x_i|^2,
    computed exactly as ``pc_stats_by_word`` computes them. Blocks without rows get NaN.
    """
    group_starts = np.asarray(group_starts, dtype=np.int64)
    sizes = group_sizes(group_starts, len(X))
    total_var, mean_sq = np.full(len(sizes), np.nan), np.full(len(sizes), np.nan)
    for words, X_words in _word_batches(X, group_starts, sizes):
        _, _, total_var[words], mean_sq[words] = _stacked_variances(X_words)
    return total_var, mean_sq


def _holds_exactly(values: np.ndarray, storage: str) -> bool:
    """Whether every value (float64, 1-d) is exactly representable in ``storage``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if storage == "float16":
            return bool(np.array_equal(values.astype(np.float16), values))
        as32 = values.astype(np.float32)
        if not np.array_equal(as32, values):
            return False
        return storage == "float32" or not np.any(as32.view(np.uint32) & np.uint32(0xFFFF))


def storage_epsilon(X: np.ndarray) -> float:
    """Machine epsilon of the coarsest format (bfloat16, float16, float32) holding every value of X exactly.

    float64's epsilon if none does (or X has NaN or no values). The values tell the format a layer was
    stored in even after conversion to float64. A format coarser than X's own dtype is first tried on
    the first 4,096 values, so rejecting it costs little, and accepted only on a full pass (in slices
    of ``BATCH_ELEMENTS``); X's own dtype (float16 or float32) is accepted without a pass.
    """
    flat = np.asarray(X).reshape(-1)
    if flat.size == 0:
        return float(np.finfo(np.float64).eps)
    for storage, eps in STORAGE_EPSILON.items():
        if storage in ("float16", "float32") and flat.dtype == np.dtype(storage):
            return eps
        if _holds_exactly(np.asarray(flat[:4096], dtype=np.float64), storage) and all(
            _holds_exactly(np.asarray(flat[i : i + BATCH_ELEMENTS], dtype=np.float64), storage)
            for i in range(4096, flat.size, BATCH_ELEMENTS)
        ):
            return eps
    return float(np.finfo(np.float64).eps)


def degenerate_tolerance(X: np.ndarray) -> float:
    """The relative-variance tolerance of ``degenerate_words`` for data X: max(eps**2, DEGENERATE_FLOOR).

    eps = ``storage_epsilon(X)``: 6.1e-5 for bfloat16-valued data, 9.5e-7 for float16, 1.4e-14 for
    float32, 1e-20 for float64 (see the comment at ``DEGENERATE_FLOOR``). Cheap on an array in its
    stored dtype (a layer read with ``read_layer(path, dtype=None)``); on float64 data it scans X.
    """
    return max(storage_epsilon(X) ** 2, DEGENERATE_FLOOR)


def degenerate_words(X: np.ndarray, group_starts: np.ndarray, rel_tol: float | None = None) -> np.ndarray:
    """Which word blocks are degenerate: all occurrence vectors identical up to storage rounding.

    A word is degenerate when total_var <= rel_tol * mean_sq (``word_variances``: total centred
    variance and mean squared norm of its rows). ``rel_tol=None`` takes ``degenerate_tolerance(X)``.
    Every MEV variant of ``pc_stats_by_word`` is NaN for exactly these words (same X, same tolerance).
    Words whose rows are all zero are degenerate too; blocks without rows are not.

    What the paper's code gave for such words depends on rounding: for bitwise-identical float32
    vectors (duplicate sentences) sklearn's ratio is 0/0 or x/0 and ``min(1.0, round(nan or inf, 3))``
    is 1.0; for vectors differing in the last bits it is an arbitrary value in [0, 1].
    """
    if rel_tol is None:
        rel_tol = degenerate_tolerance(X)
    total_var, mean_sq = word_variances(X, group_starts)
    return total_var <= rel_tol * mean_sq


def _mask_degenerate(stats: PCStats, degenerate: np.ndarray) -> PCStats:
    """NaN in every MEV variant of the degenerate words; the first vectors are kept."""
    return PCStats(*(np.where(degenerate, np.nan, column) for column in stats[:3]), stats.first_vector)


def word_pc_stats(X: np.ndarray, degenerate_tol: float | None = None) -> PCStats:
    """MEV variants and first singular vector of one word's occurrence matrix ``X`` (n, d).

    Returns scalars (0-d arrays) and a (d,) vector; the MEV variants are NaN when the word is degenerate
    (``degenerate_words`` with ``rel_tol=degenerate_tol``). Always takes the one-word route (Gram matrix
    for n <= d, scatter matrix for n > d), whatever n.
    """
    X = np.asarray(X, dtype=np.float64)
    tol = degenerate_tolerance(X) if degenerate_tol is None else degenerate_tol
    mean, centred, total_var, mean_sq = _stacked_variances(X[None])
    degenerate = total_var <= tol * mean_sq
    stats = _word_pc_stats_raw(X, mean[0], centred[0], total_var[0], mean_sq[0], with_centred=not degenerate[0])
    return PCStats(*(value[0] for value in _mask_degenerate(stats, degenerate)))


def pc_stats_by_word(X: np.ndarray, group_starts: np.ndarray, degenerate_tol: float | None = None) -> PCStats:
    """``word_pc_stats`` for every word block of ``X`` at once.

    Words with few occurrences (the large majority under a Zipf distribution) are stacked by size and
    solved with one batched eigendecomposition per size; the others one by one. The MEV variants are
    NaN for exactly the words of ``degenerate_words(X, group_starts, degenerate_tol)`` (and for blocks
    without rows). ``degenerate_tol=None`` takes ``degenerate_tolerance(X)``: pass it explicitly, once
    per layer, when X is a float64 copy of a layer stored in float16 (it is then found without a scan).
    """
    group_starts = np.asarray(group_starts, dtype=np.int64)
    sizes = group_sizes(group_starts, len(X))
    k, d = len(group_starts), X.shape[1]
    tol = degenerate_tolerance(X) if degenerate_tol is None else degenerate_tol
    degenerate = np.zeros(k, dtype=bool)
    mev, mev_literal, mev_centered = (np.full(k, np.nan) for _ in range(3))
    first_vector = np.full((k, d), np.nan)
    for words, X_words in _word_batches(X, group_starts, sizes):
        mean, centred, total_var, mean_sq = _stacked_variances(X_words)
        degenerate[words] = total_var <= tol * mean_sq
        if X_words.shape[1] <= min(BATCHED_MAX_OCCURRENCES, d):
            stats = _pc_stats_stacked(X_words, mean, centred, total_var, mean_sq)
        else:
            stats = _word_pc_stats_raw(
                X_words[0], mean[0], centred[0], total_var[0], mean_sq[0], with_centred=not degenerate[words[0]]
            )
        mev[words], mev_literal[words], mev_centered[words], first_vector[words] = stats
    return _mask_degenerate(PCStats(mev, mev_literal, mev_centered, first_vector), degenerate)
