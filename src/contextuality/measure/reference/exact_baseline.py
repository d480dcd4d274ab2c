"""A layer's anisotropy baselines without sampling: the values the paper's estimators aim at.

``exact_baseline`` reads the whole layer once, whole sentences at a time, in float64, and accumulates
two sets of sums: the unit rows' (``_CosineSums``: the three exact cosine baselines) and the weighted
moments around a shift (``_WeightedMoments``: the three exact MEV baselines).

Weights: the paper draws a sentence uniformly, then a row uniformly within it, so row i of sentence
s has p_i = 1 / (S len_s), with S the sentences that have at least one stored row and len_s the
sentence's stored rows (zero rows included: they can be drawn). Cosines with a zero row are
undefined and left out, as the paper's ``np.nanmean`` and ``reference.anisotropy_baseline`` leave them
out: each cosine value is the conditional mean given that both rows are non-zero. With u_i the unit
rows (0 for zero rows), P = sum p_i and Q = sum p_i^2 over the non-zero rows:

* ``cosine`` = (|sum p_i u_i|^2 - Q) / (P^2 - Q): the mean cosine of two independent draws from
  p that are not the same row (spec "Exact anisotropy"; P = 1 without zero rows);
* ``cosine_between``: the same, over draws from different sentences: with m_s = sum_{i in s} u_i /
  len_s and w_s = (non-zero rows of s) / len_s, (|sum m_s|^2 - sum |m_s|^2) / ((sum w_s)^2 -
  sum w_s^2). This is what two distinct draws of the paper's code compare (its sentences are
  sampled without replacement), so the expected value of ``anisotropy_baseline``'s cosine is
  exactly 1/m + (1 - 1/m) * cosine_between with m vectors drawn (a draw paired with itself gives
  1), when no row is zero. It differs from ``cosine`` only through same-sentence pairs, of weight
  about 1/S;
* ``cosine_uniform`` = (|sum u_i|^2 - N) / (N (N - 1)) over the N non-zero rows: every distinct
  pair of occurrences equally weighted.

MEV (d x d accumulation, about 2 N d^2 flops): the paper's MEV baseline is the TruncatedSVD ratio of
m = 1,000 rows drawn as above. As m grows it converges to the same ratio for the distribution p
itself, which is what ``mev`` is: with mean mu = sum p_i x_i, second moment M = sum p_i x_i x_i^T and
covariance C = M - mu mu^T (zero rows included as points, as the paper's TruncatedSVD includes them),
v1 = top eigenvector of M (the uncentred direction) and mev = v1^T C v1 / tr C; ``mev_centered`` =
lambda_1(C) / tr C and ``mev_literal`` = lambda_1(M) / tr M are the population values of the other
two variants. It is *not* the expected value of the paper's 1,000-row statistic, which has no closed
form and sits above it by a sample-size bias (the top direction of 1,000 rows in d dimensions fits
noise: for isotropic data the sampled value is near (1 + sqrt(d/m))^2 / d against the exact 1/d). C
is accumulated around a shift (the first chunk's weighted mean), so near-duplicate rows lose no
precision. All three are NaN when the layer is degenerate (tr C <= ``degenerate_tolerance(X)`` tr M).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.reference.measures import row_norms
from contextuality.measure.reference.word_pcs import BATCH_ELEMENTS, degenerate_tolerance, lanczos_start, top_eigenpair


class ExactBaseline(NamedTuple):
    """A layer's anisotropy baselines computed exactly, over all of its rows (``exact_baseline``)."""

    cosine: float  # paper's sampling weights p_i, pairs of distinct rows (spec: exact anisotropy A_p)
    cosine_between: float  # paper's weights, pairs of rows from different sentences
    cosine_uniform: float  # unweighted mean cosine over all distinct pairs of rows (A)
    mev: float  # population value of the paper's MEV baseline under p (TruncatedSVD ratio)
    mev_centered: float  # population value of the centred-PCA variant under p
    mev_literal: float  # population value of sigma_1^2 / sum sigma_i^2 under p
    n_vectors: int  # non-zero rows
    n_sentences: int  # sentences with at least one stored row (S)


def _sentence_ranges(offsets: np.ndarray, rows_per_chunk: int):
    """Consecutive sentence ranges [a, b) whose rows span about ``rows_per_chunk`` rows (whole sentences)."""
    chunk_of_sentence = offsets[:-1] // max(1, rows_per_chunk)
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(chunk_of_sentence)) + 1, [len(offsets) - 1]])
    return zip(bounds[:-1].tolist(), bounds[1:].tolist())


class _CosineSums:
    """The unit rows' sums behind the three exact cosine baselines, one chunk of whole sentences at a time."""

    def __init__(self, d: int):
        self.sum_u, self.sum_pu = np.zeros(d), np.zeros(d)
        self.n_nonzero, self.p_nonzero, self.p2_nonzero = 0, 0.0, 0.0
        self.sentence_sq, self.w_sum, self.w2_sum = 0.0, 0.0, 0.0

    def add(self, rows: np.ndarray, sentence_lengths: np.ndarray, p: np.ndarray) -> None:
        """Rows (float64) of sentences of the given lengths (all > 0), each row of weight p_i."""
        starts = np.cumsum(sentence_lengths) - sentence_lengths
        norms = row_norms(rows)
        nonzero = norms > 0
        U = rows / np.where(nonzero, norms, 1.0)[:, None]
        p_nz = np.where(nonzero, p, 0.0)
        self.sum_u += U.sum(axis=0)
        self.sum_pu += p @ U
        self.n_nonzero += int(nonzero.sum())
        self.p_nonzero += float(p_nz.sum())
        self.p2_nonzero += float(p_nz @ p_nz)
        m = np.add.reduceat(U, starts, axis=0) / sentence_lengths[:, None]
        self.sentence_sq += float(np.einsum("sd,sd->", m, m))
        w = np.add.reduceat(nonzero.astype(np.float64), starts) / sentence_lengths
        self.w_sum += float(w.sum())
        self.w2_sum += float(w @ w)

    def cosines(self, n_sentences: int) -> list[float]:
        """(cosine, cosine_between, cosine_uniform), clipped to [-1, 1]; NaN where undefined."""
        with np.errstate(invalid="ignore", divide="ignore"):
            cosine = (self.sum_pu @ self.sum_pu - self.p2_nonzero) / (self.p_nonzero**2 - self.p2_nonzero)
            total_m = n_sentences * self.sum_pu  # sum over sentences of m_s
            cosine_between = (total_m @ total_m - self.sentence_sq) / (self.w_sum**2 - self.w2_sum)
            n = self.n_nonzero
            cosine_uniform = (self.sum_u @ self.sum_u - n) / (n * (n - 1.0))
        return [float(np.clip(value, -1.0, 1.0)) if np.isfinite(value) else float("nan")
                for value in (cosine, cosine_between, cosine_uniform)]  # fmt: skip


class _WeightedMoments:
    """First and second moments of the rows under p, around a shift (the first chunk's weighted mean)."""

    def __init__(self, d: int):
        self.shift, self.weight, self.first_moment, self.scatter = None, 0.0, np.zeros(d), np.zeros((d, d))

    def add(self, rows: np.ndarray, p: np.ndarray) -> None:
        if self.shift is None:
            self.shift = (p @ rows) / p.sum()
        D = rows - self.shift
        self.weight += float(p.sum())
        self.first_moment += p @ D
        D *= np.sqrt(p)[:, None]
        self.scatter += D.T @ D  # one symmetric rank-k update (BLAS syrk)

    def mevs(self, tol: float) -> list[float]:
        """(mev, mev_centered, mev_literal) of the distribution; NaN when its total variance <= tol x tr M."""
        offset = self.first_moment / self.weight
        covariance = self.scatter / self.weight - np.outer(offset, offset)
        mean = self.shift + offset
        second_moment = covariance + np.outer(mean, mean)
        total_var, total_sq = float(np.trace(covariance)), float(np.trace(second_moment))
        if not total_var > tol * total_sq:
            return [float("nan")] * 3
        top_value, v1 = top_eigenpair(second_moment, mean)
        centred_top, _ = top_eigenpair(covariance, lanczos_start(len(mean)))
        mevs = [float(v1 @ covariance @ v1) / total_var, centred_top / total_var, top_value / total_sq]
        return [min(value, 1.0) for value in mevs]


def exact_baseline(
    X: np.ndarray, sentence_offsets: np.ndarray, *, with_mev: bool = True, chunk_elements: int = BATCH_ELEMENTS
) -> ExactBaseline:
    """A layer's anisotropy baselines without sampling (see the module's docstring for the definitions).

    ``X`` is the whole layer (any float dtype; rows of sentence s are ``sentence_offsets[s]:[s+1]``). It
    is read once, whole sentences at a time, about ``chunk_elements`` elements converted to float64 at
    a time; all sums are float64. ``with_mev=False`` leaves the MEV baselines NaN (no d x d sums).
    """
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    if offsets[-1] != len(X):
        raise ValueError(f"sentence_offsets ends at {offsets[-1]} but X has {len(X)} rows")
    lengths = np.diff(offsets)
    n_sentences, d = int(np.count_nonzero(lengths)), X.shape[1]
    nan = float("nan")
    if n_sentences == 0:
        return ExactBaseline(nan, nan, nan, nan, nan, nan, 0, 0)
    cosines, moments = _CosineSums(d), _WeightedMoments(d) if with_mev else None
    for a, b in _sentence_ranges(offsets, chunk_elements // max(d, 1)):
        rows = np.asarray(X[offsets[a] : offsets[b]], dtype=np.float64)
        if len(rows) == 0:
            continue
        sentence_lengths = lengths[a:b][lengths[a:b] > 0]
        p = np.repeat(1.0 / (n_sentences * sentence_lengths), sentence_lengths)
        cosines.add(rows, sentence_lengths, p)
        if moments is not None:
            moments.add(rows, p)
    mevs = moments.mevs(degenerate_tolerance(X)) if moments is not None else [nan, nan, nan]
    return ExactBaseline(*cosines.cosines(n_sentences), *mevs, cosines.n_nonzero, n_sentences)
