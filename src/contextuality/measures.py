"""The paper's measures of contextuality (spec section 4), as pure functions on arrays.

Every function takes numpy arrays (any float dtype, float16 included) and computes in float64.
Nothing here reads or writes files. Words are handled many at a time: an occurrence matrix holds the
rows of several words one after another, and ``group_starts`` gives the first row of each word's
block (the convention of ``np.add.reduceat``).

A zero row (a vector with norm 0) has no direction, so cosines involving it are left out, as the
paper's code does through ``np.nanmean``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse.linalg
import scipy.stats

# Total variance at or below this fraction of the mean squared norm is rounding noise: such words have
# identical occurrence vectors, and every MEV variant is 1 for them (one vector explains everything; the
# paper's code got there too, as ``min(1.0, nan) == 1.0``).
ZERO_VARIANCE_RELATIVE = 1e-20
# Words with at most this many occurrences are solved together, one stacked eigendecomposition per size.
BATCHED_MAX_OCCURRENCES = 48
# Symmetric matrices larger than this get their top eigenpair by Lanczos iteration, not LAPACK.
LANCZOS_MIN_SIZE = 160
# Upper bound on the float64 elements of one stacked batch (64 MiB).
BATCH_ELEMENTS = 1 << 23


class PCStats(NamedTuple):
    """First-principal-component statistics of occurrence matrices (one entry per word)."""

    mev: np.ndarray  # the paper's MEV: sklearn TruncatedSVD explained_variance_ratio_[0] (spec 4.3)
    mev_literal: np.ndarray  # sigma_1^2 / sum sigma_i^2 of the uncentred matrix (the paper's formula)
    mev_centered: np.ndarray  # first explained variance ratio of centred PCA
    first_vector: np.ndarray  # uncentred top right singular vector, unit norm, sign along the mean


class Baseline(NamedTuple):
    """Anisotropy baselines of one layer (spec 4.4)."""

    cosine: float  # mean cosine between occurrence vectors drawn uniformly with replacement
    mev: float  # the paper's MEV of the sampled vectors
    n_vectors: int  # how many vectors were sampled (one per non-empty sampled sentence)


def row_norms(X: np.ndarray) -> np.ndarray:
    """L2 norm of each row, in float64."""
    X = np.asarray(X, dtype=np.float64)
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows of ``X`` scaled to unit L2 norm, in float64; zero rows stay zero."""
    X = np.asarray(X, dtype=np.float64)
    norms = row_norms(X)[:, None]
    return X / np.where(norms > 0, norms, 1.0)


def group_sizes(group_starts: np.ndarray, n_rows: int) -> np.ndarray:
    """Number of rows in each block given the blocks' start rows."""
    return np.diff(np.append(np.asarray(group_starts, dtype=np.int64), n_rows))


def self_similarity_exact(X: np.ndarray, group_starts: np.ndarray) -> np.ndarray:
    """Exact self-similarity (Definition 1) of every word: mean cosine over all ordered pairs i != j.

    With unit rows u_i and s = sum u_i, the sum of cos(u_i, u_j) over i != j is |s|^2 - n, so one pass
    over the rows suffices. Zero rows are left out of n. Words with fewer than 2 usable rows get NaN.
    """
    U = unit_rows(X)
    group_starts = np.asarray(group_starts, dtype=np.int64)
    if len(group_starts) == 0:
        return np.empty(0)
    sums = np.add.reduceat(U, group_starts, axis=0)
    nonzero = np.add.reduceat(np.einsum("ij,ij->i", U, U).round(), group_starts)
    pairs = nonzero * nonzero - nonzero
    with np.errstate(invalid="ignore", divide="ignore"):
        values = (np.einsum("ij,ij->i", sums, sums) - nonzero) / pairs
    # identical vectors give 1 + a rounding error; a mean of cosines lies in [-1, 1]
    return np.where(pairs > 0, np.clip(values, -1.0, 1.0), np.nan)


def self_similarity_sampled(X_word: np.ndarray, rng: np.random.Generator, n_pairs: int = 1000) -> float:
    """Self-similarity as the paper's code estimates it: at most ``n_pairs`` ordered pairs i != j.

    When the word has more ordered pairs than ``n_pairs``, that many are drawn without replacement
    (like ``random.sample``); otherwise all are used. Returns the mean cosine (NaN for n < 2).
    """
    U = unit_rows(X_word)
    n = len(U)
    total = n * (n - 1)
    if total == 0:
        return float("nan")
    pair_index = rng.choice(total, size=n_pairs, replace=False) if total > n_pairs else np.arange(total)
    first, offset = np.divmod(pair_index, n - 1)
    second = offset + (offset >= first)
    cosines = np.einsum("ij,ij->i", U[first], U[second])
    usable = (U[first] != 0).any(axis=1) & (U[second] != 0).any(axis=1)
    return float(cosines[usable].mean()) if usable.any() else float("nan")


def sentence_rows(sentence_offsets: np.ndarray, sentence_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the given sentences, concatenated in order, and each sentence's row count."""
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    sentence_ids = np.asarray(sentence_ids, dtype=np.int64)
    starts, counts = offsets[sentence_ids], offsets[sentence_ids + 1] - offsets[sentence_ids]
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + within, counts


def intra_sentence_similarity(X: np.ndarray, sentence_offsets: np.ndarray, sentence_ids: np.ndarray) -> np.ndarray:
    """Intra-sentence similarity (Definition 2) of each listed sentence.

    The mean over the sentence's rows of cos(row, sentence mean), where the mean is over all of the
    sentence's stored rows. ``X`` is a whole layer (rows addressed by ``sentence_offsets``). Sentences
    without rows get NaN.
    """
    rows, counts = sentence_rows(sentence_offsets, sentence_ids)
    values = np.full(len(counts), np.nan)
    present = counts > 0
    if not present.any():
        return values
    X_sentences = np.asarray(X[rows], dtype=np.float64)
    starts = (np.cumsum(counts) - counts)[present]
    means = np.add.reduceat(X_sentences, starts, axis=0) / counts[present, None]
    U = unit_rows(X_sentences)
    unit_means = unit_rows(means)
    cosines = np.einsum("ij,ij->i", U, np.repeat(unit_means, counts[present], axis=0))
    usable = ((U != 0).any(axis=1) & np.repeat((unit_means != 0).any(axis=1), counts[present])).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        values[present] = np.add.reduceat(cosines * usable, starts) / np.add.reduceat(usable, starts)
    return values


def _top_eigenpair(S: np.ndarray, start: np.ndarray) -> tuple[float, np.ndarray]:
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


def _lanczos_start(m: int) -> np.ndarray:
    """A fixed, generic start vector (not orthogonal to any particular eigenvector)."""
    return np.random.default_rng(m).standard_normal(m)


def _finish(X, v1, sigma1_sq, centred_top, total_sq, total_var, mean):
    """MEV variants of stacked words from their spectra; shapes (k, n, d), (k, d) and (k,)."""
    v1 = v1 / np.linalg.norm(v1, axis=-1, keepdims=True)
    v1 = v1 * np.where(np.einsum("kd,kd->k", v1, mean) < 0, -1.0, 1.0)[:, None]
    projected_var = np.einsum("knd,kd->kn", X, v1).var(axis=1)
    tiny = total_var <= ZERO_VARIANCE_RELATIVE * total_sq / X.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        mev = np.where(tiny, 1.0, np.minimum(projected_var / total_var, 1.0))
        mev_centered = np.where(tiny, 1.0, np.minimum(centred_top / (total_var * X.shape[1]), 1.0))
        mev_literal = np.where(total_sq > 0, np.minimum(sigma1_sq / total_sq, 1.0), np.nan)
    return PCStats(mev, mev_literal, mev_centered, v1)


def _pc_stats_stacked(X: np.ndarray) -> PCStats:
    """PC statistics of k words with the same number n of occurrences, X of shape (k, n, d), n <= d.

    Works on the n x n Gram matrices: their top eigenpair (lambda, u) gives sigma_1^2 = lambda and
    v_1 = X^T u / sigma_1; the centred Gram matrix gives the centred PCA spectrum.
    """
    mean = X.mean(axis=1)
    centred = X - mean[:, None, :]
    gram = X @ X.transpose(0, 2, 1)
    values, vectors = np.linalg.eigh(gram)
    centred_top = np.linalg.eigvalsh(centred @ centred.transpose(0, 2, 1))[:, -1]
    v1 = np.einsum("knd,kn->kd", X, vectors[:, :, -1])
    total_sq = np.einsum("kii->k", gram)
    total_var = np.einsum("knd,knd->k", centred, centred) / X.shape[1]
    return _finish(X, v1, np.maximum(values[:, -1], 0.0), np.maximum(centred_top, 0.0), total_sq, total_var, mean)


def word_pc_stats(X: np.ndarray) -> PCStats:
    """MEV variants and first singular vector of one word's occurrence matrix ``X`` (n, d).

    Works on the smaller of the Gram matrix X X^T (n <= d) and the scatter matrix X^T X (n > d); the
    centred versions follow from them by rank-one corrections. Returns scalars (0-d arrays) and a
    (d,) vector.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    mean = X.mean(axis=0)
    centred = X - mean
    total_var = float(np.einsum("nd,nd->", centred, centred)) / n
    if n <= d:
        gram = X @ X.T
        row_means = gram.mean(axis=1)
        centred_gram = gram - row_means[:, None] - row_means[None, :] + row_means.mean()
        sigma1_sq, u1 = _top_eigenpair(gram, X @ mean)
        v1 = u1 @ X
        total_sq = float(np.trace(gram))
        centred_top, _ = _top_eigenpair(centred_gram, _lanczos_start(n))
    else:
        scatter = X.T @ X
        sigma1_sq, v1 = _top_eigenpair(scatter, mean)
        total_sq = float(np.trace(scatter))
        centred_top, _ = _top_eigenpair(scatter - n * np.outer(mean, mean), _lanczos_start(d))
    stats = _finish(
        X[None], v1[None], np.array([max(sigma1_sq, 0.0)]), np.array([max(centred_top, 0.0)]),
        np.array([total_sq]), np.array([total_var]), mean[None],
    )
    return PCStats(*(value[0] for value in stats))


def pc_stats_by_word(X: np.ndarray, group_starts: np.ndarray) -> PCStats:
    """``word_pc_stats`` for every word block of ``X`` at once.

    Words with few occurrences (the large majority under a Zipf distribution) are stacked by size and
    solved with one batched eigendecomposition per size; the others one by one.
    """
    group_starts = np.asarray(group_starts, dtype=np.int64)
    sizes = group_sizes(group_starts, len(X))
    k, d = len(group_starts), X.shape[1]
    mev, mev_literal, mev_centered = (np.full(k, np.nan) for _ in range(3))
    first_vector = np.full((k, d), np.nan)
    for size in np.unique(sizes[sizes <= min(BATCHED_MAX_OCCURRENCES, d)]):
        words = np.flatnonzero(sizes == size)
        per_batch = max(1, BATCH_ELEMENTS // (size * d))
        for batch in np.array_split(words, -(-len(words) // per_batch)):
            rows = group_starts[batch, None] + np.arange(size)
            stats = _pc_stats_stacked(np.asarray(X[rows], dtype=np.float64))
            mev[batch], mev_literal[batch], mev_centered[batch], first_vector[batch] = stats
    for word in np.flatnonzero(sizes > min(BATCHED_MAX_OCCURRENCES, d)):
        start = group_starts[word]
        mev[word], mev_literal[word], mev_centered[word], first_vector[word] = word_pc_stats(X[start : start + sizes[word]])
    return PCStats(mev, mev_literal, mev_centered, first_vector)


def mev_truncated_svd(X: np.ndarray) -> float:
    """The paper's MEV (spec 4.3): ``TruncatedSVD().fit(X).explained_variance_ratio_[0]``, clipped to 1.

    Var_rows(X v1) / sum_d Var_rows(X[:, d]) with v1 the top right singular vector of the uncentred X
    and population variances; 1 when X has no variance at all.
    """
    return float(word_pc_stats(X).mev)


def mev_literal(X: np.ndarray) -> float:
    """The paper's written MEV formula, sigma_1^2 / sum sigma_i^2 of the uncentred X."""
    return float(word_pc_stats(X).mev_literal)


def mev_centered(X: np.ndarray) -> float:
    """First explained variance ratio of centred PCA (``PCA(1).explained_variance_ratio_[0]``)."""
    return float(word_pc_stats(X).mev_centered)


def first_singular_vector(X: np.ndarray) -> np.ndarray:
    """Top right singular vector of the uncentred X (the PC static embedding), unit norm, v . mean > 0."""
    return word_pc_stats(X).first_vector


def anisotropy_baseline(
    X: np.ndarray,
    sentence_offsets: np.ndarray,
    sampled_sentence_ids: np.ndarray,
    rng: np.random.Generator,
    n_pairs: int = 1000,
) -> Baseline:
    """A layer's anisotropy baselines as the paper's code computes them (spec 4.4).

    One row is drawn uniformly from each sampled sentence (sentences without rows are skipped), giving
    V. The cosine baseline is the mean of cos(u, v) over ``n_pairs`` draws with u and v each drawn
    uniformly with replacement from V; the MEV baseline is the paper's MEV of V.
    """
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    sentence_ids = np.asarray(sampled_sentence_ids, dtype=np.int64)
    counts = offsets[sentence_ids + 1] - offsets[sentence_ids]
    present = counts > 0
    rows = offsets[sentence_ids[present]] + rng.integers(0, counts[present])
    if len(rows) == 0:
        return Baseline(float("nan"), float("nan"), 0)
    V = np.asarray(X[rows], dtype=np.float64)
    U = unit_rows(V)
    first, second = rng.integers(0, len(U), size=n_pairs), rng.integers(0, len(U), size=n_pairs)
    cosines = np.einsum("ij,ij->i", U[first], U[second])
    usable = (U[first] != 0).any(axis=1) & (U[second] != 0).any(axis=1)
    cosine = float(cosines[usable].mean()) if usable.any() else float("nan")
    return Baseline(cosine, mev_truncated_svd(V), len(rows))


def bootstrap_ci(
    values: np.ndarray, rng: np.random.Generator, n_resamples: int = 1000, confidence_level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (NaNs dropped).

    Returns (nan, nan) for fewer than 2 values or no resamples (``metrics.bootstrap_resamples: 0``),
    and (m, m) when all values equal m.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if len(values) < 2 or n_resamples < 1:
        return float("nan"), float("nan")
    if np.all(values == values[0]):
        return float(values[0]), float(values[0])
    result = scipy.stats.bootstrap(
        (values,), np.mean, n_resamples=n_resamples, confidence_level=confidence_level,
        method="percentile", rng=rng, batch=max(1, (1 << 22) // len(values)),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
