"""The paper's measures of contextuality (spec section 4), as pure functions on arrays.

Self-similarity (Definition 1: ``self_similarity_exact``, and the paper's sampled estimate
``self_similarity_sampled``), intra-sentence similarity (Definition 2), the MEV of one word's
occurrence matrix (Definition 3: ``mev_truncated_svd``, ``mev_literal``, ``mev_centered``, from
``word_pcs``), the sampled anisotropy baselines (``anisotropy_baseline``; the exact ones are
in ``exact_baseline``) and the bootstrap interval of a mean (``bootstrap_ci``). Also the row helpers the
other definitions share (``row_norms``, ``unit_rows``, ``sentence_rows``, ``row_blocks``).

Representation similarity by its textbook definitions (spec similarity-atlas 4.1), the known answers of the
streamed engine (``similarity``), O(n^2) in memory (n up to a few thousand): linear CKA from the n x n Gram
matrices (Kornblith et al. 2019: ``cka_biased_gram``; with Song et al.'s 2012 unbiased HSIC, eq. 5, on the
uncentred Grams with zeroed diagonals: ``cka_debiased_gram``), the Procrustes angle from the explicit
orthogonal map (Williams et al. 2021: ``procrustes_angle_direct``), mutual k-NN from the full cosine matrix
(Huh et al. 2024: ``mutual_knn_brute``), and a layer's rows under each of the engine's variants
(``variant_rows``).

Every function takes numpy arrays (any float dtype, float16 included) and computes in float64.
Nothing here reads or writes files. Words are handled many at a time: an occurrence matrix holds the
rows of several words one after another, and ``group_starts`` gives the first row of each word's block
(the convention of ``np.add.reduceat``).

A zero row (a vector with norm 0) has no direction, so cosines involving it are left out, as the
paper's code does through ``np.nanmean``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.reference.word_pcs import word_pc_stats
from contextuality.paper import MIN_BASELINE_VECTORS

# The geometry's full-layer passes (``rogue``, ``postprocess``) read blocks of about this many elements
# (16 MiB in float32).
BLOCK_ELEMENTS = 1 << 22


class Baseline(NamedTuple):
    """Anisotropy baselines of one layer: each measure's value between random words."""

    cosine: float  # mean cosine between occurrence vectors drawn uniformly with replacement
    mev: float  # the paper's MEV of the sampled vectors
    n_vectors: int  # how many vectors were sampled (one per non-empty sampled sentence)


def reported(baseline: Baseline) -> Baseline:
    """``baseline`` as a layer reports it: NaN (N/A) when drawn from fewer than ``MIN_BASELINE_VECTORS`` vectors."""
    if baseline.n_vectors >= MIN_BASELINE_VECTORS:
        return baseline
    return Baseline(float("nan"), float("nan"), baseline.n_vectors)


def row_norms(X: np.ndarray) -> np.ndarray:
    """L2 norm of each row, in float64."""
    X = np.asarray(X, dtype=np.float64)
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows of ``X`` scaled to unit L2 norm, in float64; zero rows stay zero."""
    X = np.asarray(X, dtype=np.float64)
    norms = row_norms(X)[:, None]
    return X / np.where(norms > 0, norms, 1.0)


def row_blocks(n_rows: int, d: int):
    """(start, stop) of consecutive row blocks of about ``BLOCK_ELEMENTS`` elements (rows of d elements)."""
    step = max(1, BLOCK_ELEMENTS // max(d, 1))
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


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


def mev_truncated_svd(X: np.ndarray) -> float:
    """The paper's MEV (Definition 3): ``TruncatedSVD().fit(X).explained_variance_ratio_[0]``, clipped to 1.

    Var_rows(X v1) / sum_d Var_rows(X[:, d]) with v1 the top right singular vector of the uncentred X
    and population variances; NaN when X is degenerate (``degenerate_words``).
    """
    return float(word_pc_stats(X).mev)


def mev_literal(X: np.ndarray) -> float:
    """The paper's written MEV formula, sigma_1^2 / sum sigma_i^2 of the uncentred X (NaN if degenerate)."""
    return float(word_pc_stats(X).mev_literal)


def mev_centered(X: np.ndarray) -> float:
    """First explained variance ratio of centred PCA (``PCA(1).explained_variance_ratio_[0]``; NaN if degenerate)."""
    return float(word_pc_stats(X).mev_centered)


def anisotropy_baseline(
    X: np.ndarray,
    sentence_offsets: np.ndarray,
    sampled_sentence_ids: np.ndarray,
    rng: np.random.Generator,
    n_pairs: int = 1000,
) -> Baseline:
    """A layer's anisotropy baselines as the paper's code computes them.

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


def bootstrap_input(values, n_resamples: int) -> tuple[np.ndarray, tuple[float, float] | None]:
    """The values a bootstrap of the mean resamples (float64, NaNs dropped), and its interval where no
    resampling is needed: (nan, nan) for fewer than 2 values or no resamples, (m, m) when all equal m."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if len(values) < 2 or n_resamples < 1:
        return values, (float("nan"), float("nan"))
    if np.all(values == values[0]):
        return values, (float(values[0]), float(values[0]))
    return values, None


def bootstrap_ci(
    values: np.ndarray, rng: np.random.Generator, n_resamples: int = 1000, confidence_level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (NaNs dropped).

    Returns (nan, nan) for fewer than 2 values or no resamples (``metrics.bootstrap_resamples: 0``),
    and (m, m) when all values equal m.
    """
    import scipy.stats  # here: its import costs each layer job that never bootstraps about half a second

    values, trivial = bootstrap_input(values, n_resamples)
    if trivial is not None:
        return trivial
    result = scipy.stats.bootstrap(
        (values,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        method="percentile",
        rng=rng,
        batch=max(1, (1 << 22) // len(values)),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


# Representation similarity (spec similarity-atlas 4.1)


def _float64(X) -> np.ndarray:
    return np.asarray(X, dtype=np.float64)


def _centred(X) -> np.ndarray:
    X = _float64(X)
    return X - X.mean(axis=0)


def variant_rows(X, variant: str = "raw", keep=None) -> np.ndarray:
    """The rows a variant measures, in float64, not centred: ``raw`` the rows; ``unit_rows`` each row at unit
    norm (a zero row stays zero); ``standardize`` each dimension divided by its standard deviation (a
    constant one set to 0); ``no_massive`` (or any ``keep``) only the rows where ``keep`` is True."""
    X = _float64(X)
    if keep is not None:
        X = X[np.asarray(keep, dtype=bool)]
    if variant == "unit_rows":
        return unit_rows(X)
    if variant == "standardize":
        sd = X.std(axis=0)
        return X / np.where(sd > 0, sd, np.inf)
    return X


def cka_biased_gram(X, Y) -> float:
    """tr(K H L H) / sqrt(tr(K H K H) tr(L H L H)), K = X X^T and L = Y Y^T uncentred, H the centring matrix."""
    X, Y = _float64(X), _float64(Y)
    n = len(X)
    H = np.eye(n) - 1.0 / n
    KH, LH = (X @ X.T) @ H, (Y @ Y.T) @ H
    trace = lambda A, B: np.sum(A * B.T)  # tr(A B) without forming A B  # noqa: E731
    return float(trace(KH, LH) / np.sqrt(trace(KH, KH) * trace(LH, LH)))


def hsic_unbiased(K, L) -> float:
    """Song et al. (2012) eq. 5: [tr(K~ L~) + 1^T K~ 1 1^T L~ 1 / ((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1] / (n (n-3)),
    K~ and L~ the Gram matrices with their diagonals set to zero."""
    n = len(K)
    K, L = K - np.diag(np.diag(K)), L - np.diag(np.diag(L))
    ones = np.ones(n)
    value = np.sum(K * L.T) + ones @ K @ ones * (ones @ L @ ones) / ((n - 1) * (n - 2))  # tr(K~ L~) first
    value -= 2.0 / (n - 2) * (ones @ K @ (L @ ones))
    return float(value / (n * (n - 3)))


def cka_debiased_gram(X, Y) -> float:
    """hsic(K, L) / sqrt(hsic(K, K) hsic(L, L)) with Song et al.'s unbiased HSIC on the uncentred linear Grams;
    NaN when a self term is <= 0."""
    X, Y = _float64(X), _float64(Y)
    K, L = X @ X.T, Y @ Y.T
    self_x, self_y = hsic_unbiased(K, K), hsic_unbiased(L, L)
    if self_x <= 0 or self_y <= 0:
        return float("nan")
    return hsic_unbiased(K, L) / float(np.sqrt(self_x * self_y))


def procrustes_angle_direct(X, Y) -> float:
    """The angle between centred X and Y, each scaled to unit Frobenius norm, after the orthogonal map Q that
    brings Y closest to X (Schoenemann's solution: Y^T X = U S V^T, Q = U V^T; the narrower side zero-padded
    to the wider): arccos <X, Y Q>."""
    X, Y = _centred(X), _centred(Y)
    width = max(X.shape[1], Y.shape[1])
    X = np.pad(X, ((0, 0), (0, width - X.shape[1]))) / np.linalg.norm(X)
    Y = np.pad(Y, ((0, 0), (0, width - Y.shape[1]))) / np.linalg.norm(Y)
    U, _, Vt = np.linalg.svd(Y.T @ X)
    return float(np.arccos(np.clip(np.sum(X * (Y @ (U @ Vt))), -1.0, 1.0)))


def knn_brute(X, k: int) -> np.ndarray:
    """Each row's k nearest rows by cosine of the centred rows (itself excluded; a zero row's cosines are 0),
    most similar first, ties to the lower row index: from the full n x n cosine matrix."""
    U = unit_rows(_centred(X))
    cosines = U @ U.T
    np.fill_diagonal(cosines, -np.inf)
    return np.argsort(-cosines, axis=1, kind="stable")[:, :k]


def mutual_knn_brute(X, Y, k: int) -> float:
    """The mean over rows of |N_k^X(i) & N_k^Y(i)| / k (Huh et al. 2024), neighbours by ``knn_brute``."""
    a, b = knn_brute(X, k), knn_brute(Y, k)
    return float(np.mean(np.sum(a[:, :, None] == b[:, None, :], axis=(1, 2))) / k)
