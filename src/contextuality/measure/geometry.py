"""A layer's geometry beyond the paper's four measures (``spec/geometry-metrics.md``), as pure functions.

Every function takes a layer's occurrence vectors ``X`` of shape (N, d), any float dtype (float16
included), and reads or writes no files. Randomness comes only from a ``numpy.random.Generator`` passed
in, so the same seed gives the same numbers.

* **Rogue dimensions** (Timkey & van Schijndel, EMNLP 2021): ``rogue_contributions`` splits the exact
  anisotropy (mean cosine over distinct pairs, optionally under the paper's sentence-then-token
  sampling weights) into one exact contribution per dimension; ``rogue_dimensions`` summarises it.
* **Massive activations** (Sun et al., 2024): ``massive_activations`` and ``massive_carriers``.
* **Post-processing**: ``standardize`` and ``abtt`` (all-but-the-top, Mu & Viswanath, ICLR 2018).
* **Isotropy** on a sample of rows: ``pc1_ratio``, ``effective_rank`` (Roy & Vetterli, 2007),
  ``isoscore`` (Rudman et al., ACL Findings 2022), ``isoscore_star`` (Rudman & Eickhoff, ICLR 2024)
  and ``twonn_dimension`` (Facco et al., 2017, through scikit-dimension).
* **Null controls**: ``gaussian_null`` and ``permuted_null``.
* ``geometry_panel``: every scalar column of one layer at once.

Precision. The full-layer passes read the layer in blocks of rows. Rogue contributions of float16 and
float32 input are computed in float32 within a block (unit rows and their weighted column sums) and
accumulated in float64 across blocks; they agree with a float64 computation on the same values to
about 1e-6 of the largest contribution (float16 itself rounds to 5e-4), at 0.6 times its cost. float64
input is processed in float64 throughout. Massive activations compare in the input's own dtype, exactly.
Everything on a sample of rows (covariance spectra, IsoScore, TwoNN) and every transform is float64.

IsoScore and the ``isoscore`` package (PyPI 2.0.1). ``isoscore`` here follows the paper's six steps
on the variance vector of the PCA-rotated points, i.e. the eigenvalues of the covariance matrix. The
steps simplify: k = (sum v)^2 / sum v^2 (the participation ratio of the spectrum), so the score is
(k - 1) / (d - 1). The package's ``IsoScore.IsoScore(points)`` agrees with it to about 1e-8 when it is
given points as (N, d): its ``n = torch.tensor(d)`` is an integer tensor, so ``torch.sqrt(n)`` runs in
float32, which is the whole difference (one-dimensional data scores 1.7e-8 there instead of 0).
Version 1.0 of the package took points as (d, N); 2.0.1 takes (N, d), so code written for 1.0 silently
gets the score of the transposed cloud (0.02 instead of 0.52 on a test cloud). 2.0.1 also fails on
float16 input (torch has no half-precision SVD on CPU). Its ``IsoScore_star(points, C0, zeta)`` with
``C0`` the identity, which its docstring recommends when no larger sample is at hand, is not invariant
to the scale of the data: with zeta = 0.5 the same cloud scores 1.00, 0.65 and 0.52 at scales 1e-3, 1
and 1e3 (it
shrinks towards a variance of 1 whatever the data's variance). ``isoscore_star`` here shrinks towards
the trace-matched identity instead; see its docstring. The I-STAR repository's own analysis code also
fed TwoNN its points transposed, as (d, N).
"""

from __future__ import annotations

import json
import warnings
from typing import NamedTuple

import numpy as np

# Default thresholds of a massive activation (Sun et al., 2024): |x| > 100 and |x| >= 1000 x median |x|.
MASSIVE_ABSOLUTE = 100.0
MASSIVE_RELATIVE = 1000.0
# The full-layer passes read blocks of about this many elements (16 MiB in float32).
BLOCK_ELEMENTS = 1 << 22
# Arrays with at most this many elements get their median |x| from np.median directly; larger ones
# from a bracket found on a strided subsample of about MEDIAN_SAMPLE elements, then one exact pass.
MEDIAN_EXACT_ELEMENTS = 1 << 24
MEDIAN_SAMPLE = 1 << 18
# Rogue-dimension shares are NaN unless the total anisotropy exceeds this many standard deviations of
# its distribution under isotropic directions (see ``anisotropy_noise``).
ROGUE_NOISE_SIGMAS = 3.0
# How many dimensions ``rogue_dimensions`` names, and the shares it reports.
ROGUE_TOP = 10
ROGUE_SHARES = (1, 3, 10)
# TwoNN (Facco et al., 2017): fraction of the largest ratios r2/r1 left out of the fit.
TWONN_DISCARD_FRACTION = 0.1


# --------------------------------------------------------------------------------------------------
# Rogue dimensions


class RogueSummary(NamedTuple):
    """Per-dimension contributions to a layer's anisotropy and how concentrated they are."""

    contributions: np.ndarray  # C_k, shape (d,); sums to ``total``
    total: float  # the exact anisotropy A (unweighted) or A_p (weighted)
    noise: float  # standard deviation of ``total`` under isotropic directions (same weights and d)
    top_dims: np.ndarray  # up to ROGUE_TOP dimensions with C_k > 0, largest C_k first; empty if shares are NaN
    shares: dict  # {k: sum of the top-k C_k / total} for k in ROGUE_SHARES; NaN unless total > sigmas * noise


def _blocks(n_rows: int, d: int):
    """(start, stop) of consecutive row blocks of about BLOCK_ELEMENTS elements."""
    step = max(1, BLOCK_ELEMENTS // max(d, 1))
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


def _work_dtype(X: np.ndarray) -> type:
    return np.float64 if np.asarray(X[:0]).dtype == np.float64 else np.float32


def _unit_weighted_sums(X: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pass over X: s = sum_i w_i u_i, q = sum_i w_i^2 u_i^2 (per dimension) and the nonzero-row mask.

    u_i are the unit rows, w_i the raw weights (1 when ``weights`` is None); zero rows contribute nothing.
    """
    n, d = X.shape
    work = _work_dtype(X)
    s, q = np.zeros(d), np.zeros(d)
    nonzero = np.zeros(n, dtype=bool)
    for start, stop in _blocks(n, d):
        block = np.array(X[start:stop], dtype=work)  # a copy: it is squared in place below
        squared_norms = np.einsum("ij,ij->i", block, block)
        nonzero[start:stop] = squared_norms > 0
        scale = np.zeros(stop - start, dtype=work)
        usable = nonzero[start:stop]
        np.divide(1.0, np.sqrt(squared_norms, where=usable, out=scale), where=usable, out=scale)
        if weights is not None:
            scale *= np.asarray(weights[start:stop], dtype=work)
        s += scale @ block
        np.square(block, out=block)
        q += np.square(scale) @ block
    return s, q, nonzero


def _check_weights(weights, n_rows: int) -> np.ndarray | None:
    if weights is None:
        return None
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (n_rows,) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite, non-negative and one per row")
    return weights


def _rogue(X: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Contributions C_k and the mask of nonzero rows (see ``rogue_contributions``)."""
    weights = _check_weights(weights, X.shape[0])
    s, q, nonzero = _unit_weighted_sums(X, weights)
    nan = np.full(X.shape[1], np.nan)
    if weights is None:
        n = int(nonzero.sum())
        return ((s * s - q) / (n * (n - 1.0)) if n >= 2 else nan), nonzero
    total_weight = float(weights[nonzero].sum())
    if total_weight <= 0:
        return nan, nonzero
    p_squared = float(np.sum(np.square(weights[nonzero] / total_weight)))
    if p_squared >= 1.0 - 1e-12:
        return nan, nonzero
    s, q = s / total_weight, q / total_weight**2
    return (s * s - q) / (1.0 - p_squared), nonzero


def rogue_contributions(X: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Each dimension's exact contribution C_k to the layer's anisotropy; the C_k sum to it exactly.

    cos(u, v) = sum_k u_k v_k for unit u, v, so the mean cosine over random pairs splits into one term
    per dimension. Unweighted (all ordered pairs i != j of the N nonzero rows):
    C_k = ((sum_i u_ik)^2 - sum_i u_ik^2) / (N (N - 1)), summing to A = (|sum u_i|^2 - N) / (N (N - 1)).
    With occurrence weights p_i (the paper's baseline draws a sentence uniformly, then a token in it:
    p_i = 1 / (S len(s_i))), a pair is two independent draws, a draw paired with itself excluded:
    C_k = ((sum p_i u_ik)^2 - sum p_i^2 u_ik^2) / (1 - sum p_i^2), summing to the spec's A_p.
    Zero rows have no direction and are left out (the weights are renormalised over the other rows);
    ``weights`` need not sum to 1. One pass over the rows, no pairs formed. NaN when fewer than two
    rows (or, weighted, when all weight sits on one row).
    """
    return _rogue(X, weights)[0]


def anisotropy_noise(n_rows: int, d: int, weights: np.ndarray | None = None) -> float:
    """Standard deviation of the exact anisotropy when the N directions are independent and uniform.

    Cosines between independent uniform unit vectors in R^d have mean 0 and variance 1/d, and those of
    distinct pairs are uncorrelated, so the weighted mean over pairs i != j has variance
    2 (sum_{i != j} p_i^2 p_j^2) / d / (1 - sum p_i^2)^2; unweighted, 2 / (d N (N - 1)). ``weights``
    are those of the N nonzero rows (normalised here). NaN when there is no pair.
    """
    if weights is None:
        return float(np.sqrt(2.0 / (d * n_rows * (n_rows - 1.0)))) if n_rows >= 2 else float("nan")
    p = np.asarray(weights, dtype=np.float64)
    if p.sum() <= 0:
        return float("nan")
    p = p / p.sum()
    p2, p4 = float(np.sum(p * p)), float(np.sum(p**4))
    if p2 >= 1.0 - 1e-12:
        return float("nan")
    return float(np.sqrt(max(2.0 * (p2 * p2 - p4) / d, 0.0)) / (1.0 - p2))


def rogue_shares(
    contributions: np.ndarray, noise: float = 0.0, sigmas: float = ROGUE_NOISE_SIGMAS, top: int = ROGUE_TOP,
    shares: tuple[int, ...] = ROGUE_SHARES,
) -> tuple[dict, np.ndarray]:
    """Top-k shares of the anisotropy (sum of the k largest C_k / sum of all C_k) and the top dimensions.

    A share is a fraction of the anisotropy, so it means something only when there is anisotropy to
    share. When the total is not above ``sigmas`` x ``noise`` (its standard deviation under isotropic
    directions, ``anisotropy_noise``; noise 0 means "not positive"), it cannot be told from isotropy,
    the shares would be ratios of noise (of either sign, unbounded as the total nears 0): every share is
    NaN and no dimension is named. Otherwise a share can exceed 1: dimensions with negative C_k pull the
    cosine down, and the top ones then carry more than all of it. The named dimensions are the (up to)
    ``top`` ones with C_k > 0, largest first; a dimension that lowers the cosine is not called rogue.
    Returns ({k: share}, named dimensions).
    """
    contributions = np.asarray(contributions, dtype=np.float64)
    total = float(np.sum(contributions))
    floor = max(sigmas * noise, 0.0) if np.isfinite(noise) else 0.0
    if not np.isfinite(total) or total <= floor:
        return {k: float("nan") for k in shares}, np.empty(0, dtype=np.int64)
    order = np.argsort(-contributions, kind="stable")
    ranked = contributions[order]
    values = {k: float(np.sum(ranked[:k]) / total) for k in shares}
    return values, order[:top][ranked[:top] > 0].astype(np.int64)


def rogue_dimensions(
    X: np.ndarray, weights: np.ndarray | None = None, sigmas: float = ROGUE_NOISE_SIGMAS, top: int = ROGUE_TOP
) -> RogueSummary:
    """``rogue_contributions`` of one layer with its total, noise level, top dimensions and shares."""
    contributions, nonzero = _rogue(X, weights)
    row_weights = None if weights is None else np.asarray(weights, dtype=np.float64)[nonzero]
    noise = anisotropy_noise(int(nonzero.sum()), X.shape[1], row_weights)
    shares, named = rogue_shares(contributions, noise, sigmas, top)
    return RogueSummary(contributions, float(np.sum(contributions)), noise, named, shares)


# --------------------------------------------------------------------------------------------------
# Massive activations


class MassiveActivations(NamedTuple):
    """Where a layer's massive activations sit (Sun et al., 2024)."""

    dims: np.ndarray  # dimensions holding at least one massive activation, ascending
    dim_counts: np.ndarray  # for each of ``dims``, how many rows carry a massive activation there
    rows: np.ndarray  # bool (N,): rows (occurrences) carrying at least one massive activation
    threshold: float  # smallest |x| (in the layer's dtype) that counted as massive
    median_abs: float  # the layer's median |x|; NaN when not needed (no |x| above ``absolute`` at all)

    @property
    def n_occurrences(self) -> int:
        return int(self.rows.sum())


def _smallest_at_least(value: float, dtype, strict: bool = False):
    """The smallest number of ``dtype`` that is >= ``value`` (> when ``strict``), as a ``dtype`` scalar.

    Comparing an array with it in its own dtype is then the exact comparison with ``value``, without
    converting the array (inf when no finite number of the dtype qualifies).
    """
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore"):
        candidate = dtype.type(value)
    if float(candidate) < value or (strict and float(candidate) == value):  # compared in float64
        candidate = np.nextafter(candidate, dtype.type(np.inf))
    return candidate


_FLOAT16_INF_KEY = np.uint16(0x7C00)


def _magnitudes(block: np.ndarray) -> np.ndarray:
    """|x| in an order-preserving form, without converting float16 (numpy's float16 arithmetic is slow).

    For float16 these are the bit patterns with the sign cleared (uint16, increasing with |x|; inf is
    0x7C00 and NaNs lie above it); for other dtypes np.abs.
    """
    if block.dtype == np.float16:
        return np.ascontiguousarray(block).view(np.uint16) & np.uint16(0x7FFF)
    return np.abs(block)


def _magnitude_key(value, dtype: np.dtype):
    """The ``_magnitudes`` key of a non-negative scalar of ``dtype``."""
    return np.float16(value).view(np.uint16) if dtype == np.float16 else value


def _magnitude_values(keys: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Back from ``_magnitudes`` keys to |x| in float64."""
    return (keys.view(np.float16) if dtype == np.float16 else keys).astype(np.float64)


def _is_number(keys: np.ndarray, dtype: np.dtype) -> np.ndarray | bool:
    return keys <= _FLOAT16_INF_KEY if dtype == np.float16 else True


def median_abs(X: np.ndarray, exact_limit: int = MEDIAN_EXACT_ELEMENTS) -> float:
    """Exact median of |x| over all entries (np.median's convention: mean of the two middle values).

    Up to ``exact_limit`` entries this is np.median. Above it, a full partition of the layer (1.5 s for
    300k x 384) is avoided: the quantiles 0.5 -/+ 6 standard errors of a strided subsample bracket the
    median, one pass counts the entries below the bracket and keeps those inside it (a few percent), and
    the median is selected among them. Should the bracket miss (it never should), np.median decides.
    Entries are expected to be finite (a NaN makes the result NaN, as in np.median).
    """
    X = np.asarray(X)
    size = X.size
    if size == 0:
        return float("nan")
    if size <= exact_limit:
        return float(np.median(np.abs(np.asarray(X, dtype=np.float64))))
    dtype = X.dtype
    flat = X.reshape(-1)
    sample = np.sort(_magnitudes(flat[:: max(1, size // MEDIAN_SAMPLE)]))
    margin = 6.0 * np.sqrt(0.25 / len(sample))
    low = sample[max(0, int(np.floor((0.5 - margin) * len(sample))) - 1)]
    high = sample[min(len(sample) - 1, int(np.ceil((0.5 + margin) * len(sample))))]
    below, inside = 0, []
    for a, b in _blocks(X.shape[0], size // max(X.shape[0], 1)):
        keys = _magnitudes(X[a:b])
        below += int(np.count_nonzero(keys < low))
        inside.append(keys[(keys >= low) & (keys <= high)])
    inside = _magnitude_values(np.concatenate(inside), dtype)
    ranks = [size // 2] if size % 2 else [size // 2 - 1, size // 2]
    local = [r - below for r in ranks]
    if min(local) < 0 or max(local) >= len(inside):
        return float(np.median(np.abs(np.asarray(X, dtype=np.float64))))
    return float(np.mean(np.partition(inside, local)[local]))


def massive_activations(
    X: np.ndarray, absolute: float = MASSIVE_ABSOLUTE, relative: float = MASSIVE_RELATIVE
) -> MassiveActivations:
    """The layer's massive activations: entries with |x| > ``absolute`` and |x| >= ``relative`` x median |x|.

    Sun et al. (2024) call an activation massive when it exceeds 100 in magnitude and is about 1,000
    times the median magnitude of the layer (in LLaMA-2-7B, about 2,000 against a median near 0.2, in
    two fixed dimensions). The comparison runs in the layer's own dtype against the thresholds rounded
    up to that dtype, so it is exact and converts nothing. When no entry exceeds ``absolute``, the
    median is not needed and ``median_abs`` is NaN. NaN entries are never massive.
    """
    X = np.asarray(X)
    n, d = X.shape
    dtype = X.dtype
    above_absolute = _smallest_at_least(absolute, dtype, strict=True)
    absolute_key = _magnitude_key(above_absolute, dtype)
    largest = max((_magnitudes(X[a:b]).max() for a, b in _blocks(n, d)), default=None)
    if largest is None or not largest >= absolute_key:
        none = np.empty(0, np.int64)
        return MassiveActivations(none, none, np.zeros(n, bool), float(above_absolute), float("nan"))
    median = median_abs(X)
    threshold = max(_smallest_at_least(relative * median, dtype), above_absolute)
    key = _magnitude_key(threshold, dtype)
    rows = np.zeros(n, dtype=bool)
    counts = np.zeros(d, dtype=np.int64)
    for a, b in _blocks(n, d):
        keys = _magnitudes(X[a:b])
        mask = (keys >= key) & _is_number(keys, dtype)
        rows[a:b] = mask.any(axis=1)
        counts += np.count_nonzero(mask, axis=0)
    dims = np.flatnonzero(counts)
    return MassiveActivations(dims, counts[dims], rows, float(threshold), median)


class MassiveCarriers(NamedTuple):
    """Which occurrences carry a layer's massive activations."""

    top_units: list  # [(unit, rows carrying a massive activation)], most first, ties by unit
    first_position_share: float  # of the carrying rows, the fraction at position 0 of their sentence
    first_position_rate: float  # of the rows at position 0, the fraction carrying one


def massive_carriers(rows: np.ndarray, units, positions: np.ndarray, top: int = 10) -> MassiveCarriers:
    """Which units (tokens, words) carry the massive activations, and how often the first position does.

    ``rows`` is ``MassiveActivations.rows`` (a bool per occurrence), ``units`` each occurrence's unit
    label, ``positions`` its position in its sentence (0 = first stored token; special tokens are never
    stored). In decoders the first position often acts as an attention sink and carries them. Shares
    are NaN when there is nothing to divide by.
    """
    rows = np.asarray(rows, dtype=bool)
    units = np.asarray(units, dtype=object)
    positions = np.asarray(positions)
    if not (len(rows) == len(units) == len(positions)):
        raise ValueError("rows, units and positions must have one entry per occurrence")
    carried = int(rows.sum())
    first = positions == 0
    if carried:
        labels, counts = np.unique(units[rows].astype(str), return_counts=True)
        order = np.lexsort((labels, -counts))[:top]
        top_units = [(str(labels[i]), int(counts[i])) for i in order]
    else:
        top_units = []
    share = float(np.count_nonzero(first & rows) / carried) if carried else float("nan")
    rate = float(np.count_nonzero(first & rows) / np.count_nonzero(first)) if first.any() else float("nan")
    return MassiveCarriers(top_units, share, rate)


# --------------------------------------------------------------------------------------------------
# Post-processing transforms


def standardize(X: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Z-score each dimension with the layer's own mean and (population) standard deviation.

    Statistics are computed in float64, in blocks of rows (two passes, no full-size temporary). A
    constant dimension (all entries equal, standard deviation 0) becomes exactly 0 rather than NaN or
    inf: it tells the occurrences nothing apart. The result has ``dtype`` (float32 halves the memory of
    a large layer).
    """
    X = np.asarray(X)
    n, d = X.shape
    out = np.empty(X.shape, dtype=dtype)
    if n == 0:
        return out
    mean = X.mean(axis=0, dtype=np.float64)
    squares = np.zeros(d)
    constant = np.ones(d, dtype=bool)
    first = np.asarray(X[0])
    for a, b in _blocks(n, d):
        block = np.asarray(X[a:b])
        constant &= np.all(block == first, axis=0)
        centred = np.asarray(block, dtype=np.float64) - mean
        squares += np.einsum("ij,ij->j", centred, centred)
    std = np.sqrt(squares / n)
    mean = np.where(constant, first.astype(np.float64), mean)  # exactly the constant: the result is 0
    scale = np.where(constant | (std == 0), 1.0, std)
    for a, b in _blocks(n, d):
        out[a:b] = (np.asarray(X[a:b], dtype=np.float64) - mean) / scale
    return out


def abtt_components(d: int) -> int:
    """How many top principal components all-but-the-top removes: d/100 rounded (half up), at least 1."""
    return max(1, int(np.floor(d / 100.0 + 0.5)))


def principal_components(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The layer's mean (d,) and its top ``k`` principal axes (k, d), from the centred covariance in float64.

    Each axis is a unit vector, sign-fixed so that its largest-magnitude coordinate is positive
    (principal axes are defined up to sign). Built in blocks of rows: one d x d scatter matrix.
    """
    X = np.asarray(X)
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    scatter = np.zeros((d, d))
    for a, b in _blocks(n, d):
        block = np.asarray(X[a:b], dtype=np.float64) - mean
        scatter += block.T @ block
    k = min(k, d)
    _, vectors = np.linalg.eigh(scatter)
    axes = vectors[:, ::-1][:, :k].T.copy()
    signs = np.sign(axes[np.arange(k), np.argmax(np.abs(axes), axis=1)])
    return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]


def abtt(X: np.ndarray, n_components: int | None = None, dtype=np.float64) -> np.ndarray:
    """All-but-the-top (Mu & Viswanath, ICLR 2018): remove the mean, then the top principal directions.

    x' = (x - mean) - sum_{j <= D} (u_j . (x - mean)) u_j, with u_j the top D principal axes of the
    layer and D = ``abtt_components(d)`` (d/100 rounded, at least 1) unless given. The mean and a few
    dominating directions carry most of the anisotropy and little meaning; the result is centred and
    orthogonal to them. Computed in float64; the result has ``dtype``.
    """
    X = np.asarray(X)
    n, d = X.shape
    mean, axes = principal_components(X, abtt_components(d) if n_components is None else n_components)
    out = np.empty(X.shape, dtype=dtype)
    for a, b in _blocks(n, d):
        block = np.asarray(X[a:b], dtype=np.float64) - mean
        out[a:b] = block - (block @ axes.T) @ axes
    return out


# --------------------------------------------------------------------------------------------------
# Isotropy on a sample of rows


def sample_rows(X: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` rows drawn uniformly without replacement (all rows if there are fewer), in row order."""
    n = X.shape[0]
    if size >= n:
        return np.asarray(X[:])
    return np.asarray(X[np.sort(rng.choice(n, size=size, replace=False))])


def _centred(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return X - X.mean(axis=0)


def _spectrum_of_centred(Xc: np.ndarray) -> np.ndarray:
    n, d = Xc.shape
    if n < d:  # the nonzero eigenvalues of Xc^T Xc are those of the smaller Gram matrix Xc Xc^T
        values = np.concatenate([np.linalg.eigvalsh(Xc @ Xc.T), np.zeros(d - n)])
    else:
        values = np.linalg.eigvalsh(Xc.T @ Xc)
    return np.maximum(np.sort(values)[::-1], 0.0) / max(n, 1)


def covariance_spectrum(X: np.ndarray) -> np.ndarray:
    """Eigenvalues of the centred covariance (divisor N), descending, length d: the PCA variances.

    Uses the N x N Gram matrix when N < d (its eigenvalues, then d - N zeros). Every measure below is a
    ratio of these, so the divisor does not matter.
    """
    return _spectrum_of_centred(_centred(X))


def pc1_ratio(X: np.ndarray) -> float:
    """Share of the total variance on the first principal component, lambda_max / sum lambda.

    What LLM-Microscope calls anisotropy: 1/d for isotropic data, 1 for data on a line. NaN without
    variance.
    """
    return _pc1_ratio(covariance_spectrum(X))


def _pc1_ratio(values: np.ndarray) -> float:
    total = float(values.sum())
    return float(values[0] / total) if total > 0 else float("nan")


def effective_rank(X: np.ndarray) -> float:
    """Effective rank (Roy & Vetterli, 2007): exp of the entropy of p_j = sigma_j / sum sigma.

    sigma_j are the singular values of the centred matrix (sqrt(N lambda_j)). About d for isotropic
    Gaussian data with N >> d, k for data spanning a k-dimensional subspace. Eigenvalues at the level of
    rounding (below lambda_max * max(N, d) * machine epsilon) count as 0, as in a numerical rank.
    """
    return _effective_rank(covariance_spectrum(X), X.shape[0])


def _effective_rank(values: np.ndarray, n_rows: int) -> float:
    if not values.size or values[0] <= 0:
        return float("nan")
    values = np.where(values > values[0] * max(n_rows, len(values)) * np.finfo(np.float64).eps, values, 0.0)
    sigma = np.sqrt(values)
    p = sigma[sigma > 0] / sigma.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def isoscore_from_variances(variances: np.ndarray) -> float:
    """IsoScore (Rudman, Gillman, Rayne & Eickhoff, ACL Findings 2022) of a PCA variance vector.

    The paper's steps 3-6 on v (length n = d): v_hat = sqrt(n) v / |v|; isotropy defect
    delta = |v_hat - 1| / sqrt(2 (n - sqrt(n))); dimensions used k = (n - delta^2 (n - sqrt(n)))^2 / n;
    score (k - 1) / (n - 1), from 0 (one direction) to 1 (all directions equally). Algebraically k is
    the participation ratio (sum v)^2 / sum v^2. NaN for n = 1 or v = 0.
    """
    v = np.asarray(variances, dtype=np.float64)
    n = len(v)
    norm = float(np.linalg.norm(v))
    if n < 2 or norm == 0:
        return float("nan")
    v_hat = np.sqrt(n) * v / norm
    defect = np.linalg.norm(v_hat - 1.0) / np.sqrt(2.0 * (n - np.sqrt(n)))
    k = (n - defect**2 * (n - np.sqrt(n))) ** 2 / n
    return float((k - 1.0) / (n - 1.0))


def isoscore(X: np.ndarray) -> float:
    """IsoScore of the rows of X (N, d): steps 1-2 (PCA rotation, variance per axis) are the eigenvalues
    of the centred covariance; steps 3-6 are ``isoscore_from_variances``. Low when N < d: a sample
    covariance has at most N - 1 nonzero eigenvalues, and even for N > d its eigenvalues spread
    (Marchenko-Pastur), so an isotropic Gaussian scores about 1 - d/N, not 1 (see ``isoscore_star``).
    """
    return isoscore_from_variances(covariance_spectrum(X))


def dispersion_shrinkage(X: np.ndarray) -> float:
    """The shrinkage intensity zeta that ``isoscore_star`` uses by default (see there)."""
    Xc = _centred(X)
    return _dispersion_shrinkage(Xc, _spectrum_of_centred(Xc))


def _dispersion_shrinkage(Xc: np.ndarray, values: np.ndarray) -> float:
    n = Xc.shape[0]
    if n < 2:
        return float("nan")
    mean = float(values.mean())
    dispersion = float(np.sum((values - mean) ** 2))  # |S - mu I|_F^2
    if dispersion <= 0:
        return 0.0
    squared_norms = np.einsum("ij,ij->i", Xc, Xc)
    # Ledoit & Wolf (2004): sampling error of S, (1/N^2) sum_i |x_i x_i^T - S|_F^2
    sampling = (float(np.sum(squared_norms**2)) / n - float(np.sum(values**2))) / n
    sampling = min(max(sampling, 0.0), dispersion)
    return 1.0 - np.sqrt(1.0 - sampling / dispersion)


def isoscore_star(X: np.ndarray, zeta: float | None = None, C0: np.ndarray | None = None) -> float:
    """IsoScore* (Rudman & Eickhoff, ICLR 2024): IsoScore of a shrinkage covariance, stable when N < d.

    The authors' definition (their ``isoscore_star(points, C0, zeta)``): IsoScore of the eigenvalues of
    S_zeta = (1 - zeta) S + zeta C0, with S the sample covariance, C0 a "shrinkage covariance matrix"
    and zeta in [0, 1]; zeta = 0 is IsoScore. Their analysis takes C0 from up to 250,000 points of the
    same model and zeta = 0.75; without a larger sample they advise the identity.

    Default here: C0 = mu I with mu = tr(S) / d (the identity scaled to the data: the bare identity
    makes the score depend on the data's units), and zeta chosen from the data so that the shrunk
    spectrum has the population's dispersion. IsoScore depends on the spectrum only through its
    dispersion |S - mu I|_F^2 relative to d mu^2 (k = d^2 mu^2 / (d mu^2 + dispersion)). The sample
    dispersion overestimates the population's by the sampling error beta^2 = E|S - Sigma|_F^2, which
    Ledoit & Wolf (2004) estimate as (1/N^2) sum_i |x_i x_i^T - S|_F^2 (distribution-free, fourth
    moments included). Shrinking scales the dispersion by (1 - zeta)^2, so
    zeta = 1 - sqrt(1 - beta^2 / dispersion) makes it the estimate dispersion - beta^2 of the
    population's. (Ledoit-Wolf's own zeta = beta^2 / dispersion, Frobenius-optimal for the matrix,
    shrinks the dispersion to about its square over the sample's, biasing the score towards 1.) In
    simulated Gaussian clouds in d = 384 (one draw each; spectra spiked, 1/j, 1/sqrt(j), rank 20) it
    came within 0.06 of the population IsoScore from N = 100 and within 0.006 at N = 5,000, where
    IsoScore itself was low by up to 0.4 at N = 100 and 0.02 at N = 5,000; isotropic clouds scored
    0.92, 0.998 and 1.000 at N = 100, 1,000 and 5,000 (IsoScore: 0.20, 0.72 and 0.93). As N / d grows,
    zeta goes to 0 and IsoScore* to IsoScore.

    Pass ``zeta`` to fix the intensity, and ``C0`` (d x d, e.g. the covariance of a larger sample of the
    layer, as the authors did; then ``zeta`` is required) to shrink towards another target.
    """
    Xc = _centred(X)
    n = Xc.shape[0]
    values = _spectrum_of_centred(Xc)
    if C0 is None:
        if zeta is None:
            zeta = _dispersion_shrinkage(Xc, values)
        return isoscore_from_variances((1.0 - zeta) * values + zeta * values.mean())
    if zeta is None:
        raise ValueError("isoscore_star with a shrinkage target C0 needs zeta")
    S = Xc.T @ Xc / max(n - 1, 1)  # the authors' torch.cov / np.cov: C0 is absolute, so the divisor matters
    return isoscore_from_variances(np.linalg.eigvalsh((1.0 - zeta) * S + zeta * np.asarray(C0, dtype=np.float64)))


class TwoNN(NamedTuple):
    """TwoNN intrinsic dimension and what was discarded before the fit."""

    dimension: float
    duplicate_fraction: float  # share of rows dropped as exact duplicates of another row (r1 = 0)
    n_points: int  # distinct rows the estimate used (before the largest ratios are discarded)


def twonn_dimension(
    X: np.ndarray, discard_fraction: float = TWONN_DISCARD_FRACTION, method: str = "linear"
) -> TwoNN:
    """TwoNN intrinsic dimension (Facco, d'Errico, Rodriguez & Laio, Sci. Rep. 2017), via scikit-dimension.

    mu_i = r2 / r1, each point's distances to its second and first nearest neighbours, follow a
    Pareto law whose exponent is the dimension. Exact duplicate rows (r1 = 0, ratio undefined; common
    in input layers, where every occurrence of a token may share one vector) are removed first, keeping
    one copy each; ``duplicate_fraction`` says how many went. Then ``skdim.id.TwoNN`` fits the
    dimension after discarding the largest ``discard_fraction`` of the ratios (Facco et al.'s
    heuristic, 10% by default; ``method="linear"`` is their fit through the origin of -log(1 - F) on
    log mu, "mle" the censored maximum-likelihood estimate). Neighbours come from scikit-learn's exact
    brute-force search, in float64. NaN with fewer than 3 distinct rows.

    TwoNN sees the local dimension at the scale of nearest neighbours and saturates for high-dimensional
    clouds of few points: an isotropic Gaussian in d = 384 with 5,000 points gives far less than 384.
    """
    from sklearn.neighbors import NearestNeighbors
    from skdim.id import TwoNN as SkdimTwoNN

    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    distinct = np.unique(X, axis=0) if n else X
    duplicate_fraction = 1.0 - len(distinct) / n if n else float("nan")
    if len(distinct) < 3:
        return TwoNN(float("nan"), duplicate_fraction, len(distinct))
    neighbours = NearestNeighbors(n_neighbors=2, algorithm="brute").fit(distinct)
    distances, _ = neighbours.kneighbors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows closer than rounding after de-duplication are dropped
        usable = int(np.count_nonzero(distances[:, 0] > 0))
        try:
            estimator = SkdimTwoNN(discard_fraction=discard_fraction, dist=True, method=method).fit(distances)
        except ValueError:  # fewer than 2 ratios left after the discard
            return TwoNN(float("nan"), duplicate_fraction, usable)
    return TwoNN(float(estimator.dimension_), duplicate_fraction, usable)


def evenly_spaced(n_rows: int, size: int | None) -> np.ndarray:
    """``size`` row indices spread evenly over ``range(n_rows)`` (all rows if ``size`` is None or larger).

    Applied to a uniform random sample kept in row order, this gives a smaller sample spread over the
    whole layer, with no further random draws.
    """
    if size is None or size >= n_rows:
        return np.arange(n_rows)
    return (np.arange(size) * n_rows) // size


def isotropy_measures(
    X: np.ndarray, twonn_discard_fraction: float = TWONN_DISCARD_FRACTION, twonn_sample_size: int | None = None
) -> dict:
    """pc1_ratio, effective_rank, isoscore, isoscore_star, twonn_dimension (and its duplicate fraction)
    of a sample of rows, sharing one centring and one eigendecomposition.

    TwoNN's exact neighbour search costs N^2 d, by far the largest term; ``twonn_sample_size`` runs it
    on that many evenly spaced rows of X (``evenly_spaced``) instead of all.
    """
    Xc = _centred(X)
    values = _spectrum_of_centred(Xc)
    zeta = _dispersion_shrinkage(Xc, values)
    twonn = twonn_dimension(np.asarray(X)[evenly_spaced(len(X), twonn_sample_size)], twonn_discard_fraction)
    return {
        "pc1_ratio": _pc1_ratio(values),
        "effective_rank": _effective_rank(values, Xc.shape[0]),
        "isoscore": isoscore_from_variances(values),
        "isoscore_star": (
            isoscore_from_variances((1.0 - zeta) * values + zeta * values.mean()) if np.isfinite(zeta) else float("nan")
        ),
        "twonn_dimension": twonn.dimension,
        "twonn_duplicate_fraction": twonn.duplicate_fraction,
    }


# --------------------------------------------------------------------------------------------------
# Null controls


def gaussian_null(n_rows: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """An isotropic standard Gaussian cloud of the given shape (float64): what "isotropic" looks like
    for N points in d dimensions, sampling noise included."""
    return rng.standard_normal((n_rows, d))


def permuted_null(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """X with each dimension (column) shuffled across rows independently of the others.

    Every dimension keeps its values, so its mean, spread and outliers (a rogue dimension's offset
    included); only the joint structure between dimensions is broken. Same dtype as X.
    """
    return rng.permuted(np.asarray(X), axis=0)


# --------------------------------------------------------------------------------------------------
# One layer's panel

def _indices(values) -> str:
    return ",".join(str(int(v)) for v in values)


def geometry_panel(
    X: np.ndarray,
    rng: np.random.Generator,
    sample_size: int,
    weights: np.ndarray | None = None,
    units=None,
    positions: np.ndarray | None = None,
    *,
    massive_absolute: float = MASSIVE_ABSOLUTE,
    massive_relative: float = MASSIVE_RELATIVE,
    twonn_discard_fraction: float = TWONN_DISCARD_FRACTION,
    twonn_sample_size: int | None = None,
) -> dict:
    """Every geometry column of one layer, as a flat dict of scalars (one row of a per-layer table).

    Over all N rows of X: the rogue-dimension shares of the exact anisotropy (weighted by ``weights``
    when given, e.g. the paper's p_i = 1 / (S len(s_i)); see ``rogue_contributions``) and the massive
    activations. On ``sample_size`` rows drawn with ``rng``: the isotropy measures (TwoNN on
    ``twonn_sample_size`` of them if given, see ``isotropy_measures``). The same measures
    and the rogue top-1 share (unweighted) are computed on two nulls of the sample's shape: an
    isotropic Gaussian and the sample with each dimension permuted across rows. ``rng`` is used in a
    fixed order (sample, Gaussian, permutation), so a seed fixes every number.

    Columns: rogue_anisotropy (the sum of the contributions: A, or A_p with weights),
    rogue_top1_share, rogue_top3_share, rogue_top10_share (NaN when the anisotropy is not above 3
    standard deviations of its isotropic null, see ``rogue_shares``), rogue_dims (up to ten dimensions
    with positive contribution, largest first, e.g. "588,12,3"; "" when the shares are NaN),
    massive_dims (ascending, "" if none), massive_occurrences, massive_top_units (JSON list of
    [unit, count], most first; "" if none or without ``units``/``positions``), massive_first_position_share,
    massive_first_position_rate (see ``massive_carriers``; NaN without them), pc1_ratio,
    effective_rank, isoscore, isoscore_star, twonn_dimension, twonn_duplicate_fraction, then
    null_gaussian_* and null_permuted_* for the five isotropy measures, twonn_duplicate_fraction and
    rogue_top1_share.

    Cost (CPU seconds on one core, 300k x 384 float16): the rogue pass 0.4 (mostly converting float16),
    massive activations 0.05 (0.4 when some |x| > 100, for the exact median), and about 0.7 for each
    of the three isotropy blocks on 5,000 rows, nearly all of it TwoNN's exact neighbour search
    (N^2 d): 3.3 in all, 1.6 with ``twonn_sample_size=2000``.
    """
    d = X.shape[1]
    rogue = rogue_dimensions(X, weights)
    massive = massive_activations(X, massive_absolute, massive_relative)
    row = {
        "rogue_anisotropy": rogue.total,
        "rogue_top1_share": rogue.shares[1],
        "rogue_top3_share": rogue.shares[3],
        "rogue_top10_share": rogue.shares[10],
        "rogue_dims": _indices(rogue.top_dims),
        "massive_dims": _indices(massive.dims),
        "massive_occurrences": massive.n_occurrences,
        "massive_top_units": "",
        "massive_first_position_share": float("nan"),
        "massive_first_position_rate": float("nan"),
    }
    if units is not None and positions is not None:
        carriers = massive_carriers(massive.rows, units, positions)
        row["massive_top_units"] = json.dumps(carriers.top_units, ensure_ascii=False) if carriers.top_units else ""
        row["massive_first_position_share"] = carriers.first_position_share
        row["massive_first_position_rate"] = carriers.first_position_rate
    sample = np.asarray(sample_rows(X, rng, sample_size), dtype=np.float64)
    gaussian = gaussian_null(len(sample), d, rng)
    permuted = permuted_null(sample, rng)
    row.update(isotropy_measures(sample, twonn_discard_fraction, twonn_sample_size))
    for prefix, null in (("null_gaussian_", gaussian), ("null_permuted_", permuted)):
        measures = isotropy_measures(null, twonn_discard_fraction, twonn_sample_size)
        row.update({prefix + key: value for key, value in measures.items()})
        row[prefix + "rogue_top1_share"] = rogue_dimensions(null).shares[1]
    return row
