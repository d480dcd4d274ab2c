"""Rogue dimensions and massive activations of a layer (``spec/geometry-metrics.md``), as pure functions.

Every function takes a layer's occurrence vectors ``X`` of shape (N, d), any float dtype (float16
included), reads or writes no files and draws nothing at random. Both read every row, in blocks.

* **Rogue dimensions** (Timkey & van Schijndel, EMNLP 2021): ``rogue_contributions`` splits the exact
  anisotropy (mean cosine over distinct pairs, optionally under the paper's sentence-then-token
  sampling weights) into one exact contribution per dimension; ``rogue_dimensions`` summarises it.
* **Massive activations** (Sun et al., 2024): ``massive_activations`` and ``massive_carriers``.

Precision. Rogue contributions of float16 and float32 input are computed in float32 within a block
(unit rows and their weighted column sums) and accumulated in float64 across blocks; they agree with a
float64 computation on the same values to about 1e-6 of the largest contribution (float16 itself
rounds to 5e-4), at 0.6 times its cost. float64 input is processed in float64 throughout. Massive
activations compare in the input's own dtype, exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.reference.measures import row_blocks

# Default thresholds of a massive activation (Sun et al., 2024): |x| > 100 and |x| >= 1000 x median |x|.
MASSIVE_ABSOLUTE = 100.0
MASSIVE_RELATIVE = 1000.0
_FLOAT16_INF_KEY = 0x7C00  # the magnitude key of a float16 inf; NaNs lie above it
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


class RogueSummary(NamedTuple):
    """Per-dimension contributions to a layer's anisotropy and how concentrated they are."""

    contributions: np.ndarray  # C_k, shape (d,); sums to ``total``
    total: float  # the exact anisotropy A (unweighted) or A_p (weighted)
    noise: float  # standard deviation of ``total`` under isotropic directions (same weights and d)
    top_dims: np.ndarray  # up to ROGUE_TOP dimensions with C_k > 0, largest C_k first; empty if shares are NaN
    shares: dict  # {k: sum of the top-k C_k / total} for k in ROGUE_SHARES; NaN unless total > sigmas * noise


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
    for start, stop in row_blocks(n, d):
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
    contributions: np.ndarray,
    noise: float = 0.0,
    sigmas: float = ROGUE_NOISE_SIGMAS,
    top: int = ROGUE_TOP,
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
    """The smallest number of ``dtype`` (numpy's or torch's) that is >= ``value`` (> when ``strict``), as a
    numpy scalar of that dtype.

    Comparing an array with it in its own dtype is then the exact comparison with ``value``, without
    converting the array (inf when no finite number of the dtype qualifies).
    """
    dtype = np.dtype(backend.dtype_name(dtype))
    with np.errstate(over="ignore"):
        candidate = dtype.type(value)
    if float(candidate) < value or (strict and float(candidate) == value):  # compared in float64
        candidate = np.nextafter(candidate, dtype.type(np.inf))
    return candidate


def _magnitude_key(value, dtype):
    """The ``backend.magnitude_keys`` key of a non-negative scalar of ``dtype``."""
    return backend.float16_key(value) if backend.dtype_name(dtype) == "float16" else float(value)


def _magnitude_values(keys, dtype) -> np.ndarray:
    """Back from ``backend.magnitude_keys`` keys (any backend) to |x| in float64, on the host."""
    keys = backend.to_host(keys)
    if backend.dtype_name(dtype) == "float16":
        keys = keys.astype(np.uint16).view(np.float16)
    return keys.astype(np.float64)


def _is_number(keys, dtype):
    return keys <= int(_FLOAT16_INF_KEY) if backend.dtype_name(dtype) == "float16" else True


def _in_blocks(X):
    """``Blocks`` of an in-memory layer: its rows in blocks of about ``BLOCK_ELEMENTS`` elements."""
    n, d = X.shape
    return lambda: ((a, X[a:b]) for a, b in row_blocks(n, d))


def _sub_blocks(blocks):
    """The blocks of ``blocks()`` cut into ``row_blocks``, so that their temporaries stay small."""
    for first, rows in blocks():
        for a, b in row_blocks(*rows.shape):
            yield first + a, rows[a:b]


def _median_of_sorted(values: np.ndarray, ranks: list[int]) -> float:
    """np.median's value from the sorted entries at the middle rank(s): the mean of the two middle values."""
    return float(np.mean(values[ranks]))


def median_abs(X, exact_limit: int = MEDIAN_EXACT_ELEMENTS) -> float:
    """Exact median of |x| over all entries (np.median's convention: mean of the two middle values).

    Up to ``exact_limit`` entries this is np.median. Above it, a full partition of the layer (1.5 s for
    300k x 384) is avoided: the quantiles 0.5 -/+ 6 standard errors of a strided subsample bracket the
    median, one pass counts the entries below the bracket and keeps those inside it (a few percent), and
    the median is selected among them. Should the bracket miss (it never should), all entries decide.
    Entries are expected to be finite (a NaN makes the result NaN, as in np.median).
    """
    X = X if not isinstance(X, (list, tuple, float, int)) else np.asarray(X)
    if isinstance(X, np.ndarray):
        X = X.reshape(len(X), -1) if X.ndim else X.reshape(1, 1)
    return median_abs_blocks(_in_blocks(X), *X.shape, X.dtype, exact_limit)


def _every_magnitude(blocks) -> np.ndarray:
    """Every |x| of the layer in float64 on the host (small layers, or a missed bracket)."""
    xp_parts = [backend.to_host(rows).astype(np.float64).reshape(-1) for _, rows in blocks()]
    return np.abs(np.concatenate(xp_parts)) if xp_parts else np.empty(0)


def median_abs_blocks(blocks, n_rows: int, d: int, dtype, exact_limit: int = MEDIAN_EXACT_ELEMENTS) -> float:
    """``median_abs`` of a layer given as blocks: ``blocks()`` yields (first row, rows) in row order, every
    row once (each call a new pass: a layer larger than memory is read again), as numpy arrays or tensors on
    any device. The same number whatever the blocks and the backend: the subsample is the same strided
    entries, and the rest is counting and exact selection."""
    size = n_rows * d
    if size == 0:
        return float("nan")
    if size <= exact_limit:
        return float(np.median(_every_magnitude(blocks)))
    step = max(1, size // MEDIAN_SAMPLE)
    pieces = []
    for first, rows in blocks():  # the entries flat[::step], block by block
        start = first * d
        local = np.arange(-(-start // step) * step, start + rows.shape[0] * d, step) - start
        if len(local):
            flat = backend.namespace(rows).reshape(rows, (-1,))
            pieces.append(backend.to_host(backend.magnitude_keys(backend.take_rows(flat, local))))
    sample = np.sort(np.concatenate(pieces))
    margin = 6.0 * np.sqrt(0.25 / len(sample))
    low = sample[max(0, int(np.floor((0.5 - margin) * len(sample))) - 1)].item()
    high = sample[min(len(sample) - 1, int(np.ceil((0.5 + margin) * len(sample))))].item()
    below, inside = 0, []
    for _, rows in _sub_blocks(blocks):
        xp = backend.namespace(rows)
        keys = backend.magnitude_keys(rows)
        below += int(xp.sum(xp.astype(keys < low, xp.int64)))
        inside.append(_magnitude_values(keys[(keys >= low) & (keys <= high)], dtype))
    inside = np.concatenate(inside)
    ranks = [size // 2] if size % 2 else [size // 2 - 1, size // 2]
    local = [r - below for r in ranks]
    if min(local) < 0 or max(local) >= len(inside):
        return float(np.median(_every_magnitude(blocks)))
    return float(np.mean(np.partition(inside, local)[local]))


def massive_activations(
    X, absolute: float = MASSIVE_ABSOLUTE, relative: float = MASSIVE_RELATIVE
) -> MassiveActivations:
    """The layer's massive activations: entries with |x| > ``absolute`` and |x| >= ``relative`` x median |x|.

    Sun et al. (2024) call an activation massive when it exceeds 100 in magnitude and is about 1,000
    times the median magnitude of the layer (in LLaMA-2-7B, about 2,000 against a median near 0.2, in
    two fixed dimensions). The comparison runs in the layer's own dtype against the thresholds rounded
    up to that dtype, so it is exact and converts nothing. When no entry exceeds ``absolute``, the
    median is not needed and ``median_abs`` is NaN. NaN entries are never massive.
    """
    X = X if not isinstance(X, (list, tuple)) else np.asarray(X)
    return massive_activations_blocks(_in_blocks(X), *X.shape, X.dtype, absolute, relative)


def largest_magnitude(blocks, dtype, absolute: float = MASSIVE_ABSOLUTE) -> bool:
    """Whether any entry exceeds ``absolute`` (``massive_activations``' first test), over ``blocks()``."""
    key = _magnitude_key(_smallest_at_least(absolute, dtype, strict=True), dtype)
    for _, rows in _sub_blocks(blocks):
        if rows.shape[0] and bool(backend.namespace(rows).any(backend.magnitude_keys(rows) >= key)):
            return True
    return False


def massive_activations_blocks(
    blocks,
    n_rows: int,
    d: int,
    dtype,
    absolute: float = MASSIVE_ABSOLUTE,
    relative: float = MASSIVE_RELATIVE,
    *,
    any_above: bool | None = None,
) -> MassiveActivations:
    """``massive_activations`` of a layer given as blocks (``median_abs_blocks``: numpy or any device): the
    same result, each pass over the layer one call of ``blocks()``. ``any_above``: ``largest_magnitude``'s
    answer, when a pass already found it."""
    above_absolute = _smallest_at_least(absolute, dtype, strict=True)
    if any_above is None:
        any_above = largest_magnitude(blocks, dtype, absolute)
    if not any_above:
        none = np.empty(0, np.int64)
        return MassiveActivations(none, none, np.zeros(n_rows, bool), float(above_absolute), float("nan"))
    median = median_abs_blocks(blocks, n_rows, d, dtype)
    threshold = max(_smallest_at_least(relative * median, dtype), above_absolute)
    key = _magnitude_key(threshold, dtype)
    rows = np.zeros(n_rows, dtype=bool)
    counts = np.zeros(d, dtype=np.int64)
    for first, block in _sub_blocks(blocks):
        xp = backend.namespace(block)
        keys = backend.magnitude_keys(block)
        mask = (keys >= key) & _is_number(keys, dtype)
        rows[first : first + block.shape[0]] = backend.to_host(xp.any(mask, axis=1))
        counts += backend.to_host(xp.sum(xp.astype(mask, xp.int64), axis=0))
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
