"""The measurement step's engine: every measure of one layer, and of its post-processed variants, in few passes.

``contextuality.measures`` (and ``geometry``) define the measures one concern at a time, in float64; this
module computes the same numbers for a whole in-memory layer at the speed of its read, and is tested
against them. What it changes is only how the work is organised:

* **One pass over all rows** (``layer_pass``), in blocks of whole sentences grouped by sentence length:
  the unit rows' sums give the exact cosine baselines of ``measures.exact_baseline`` and the per-dimension
  contributions of ``geometry.rogue_contributions`` (the same sums); the shifted scatter matrix of each
  length class gives both the layer's uniform covariance (for ``standardize`` and ``abtt``) and the
  paper's sentence-then-token weighted moments (the exact MEV baseline), from one rank-k update per
  block. A variant's exact MEV baseline follows from these moments by its linear map, without a pass;
  its exact cosine baselines need the norms of its rows (``cosine_pass``, a lighter pass).
* **One pass over the indexed occurrences** (``word_stats``): each word's rows are gathered and
  converted once; for every variant its self-similarity and the three MEV variants of ``measures``
  come from the Gram matrix (n <= d occurrences) or the scatter matrix (n > d) of its explicitly
  centred rows, exactly as ``measures.pc_stats_by_word`` forms them. A variant's scatter matrix is the
  linear map applied to the word's own scatter (d^3, not n d^2). The top eigenpairs of thousands of
  these matrices come from a batched Lanczos iteration (``top_eigenpairs``), checked by its residual,
  with LAPACK for any matrix it does not settle.
* **Work precision.** ``work_dtype=np.float32`` (the pipeline's default for layers stored in float16 or
  float32) runs the products and eigen-solves in float32 and every sum over rows in float64; means are
  taken in float64 before centring, so near-duplicate rows keep their spread. Measured against the
  float64 reference on real layers it agrees to about 1e-6 on the layer means (the paper reports 3
  decimals; float16 storage itself rounds to 5e-4). ``work_dtype=np.float64`` agrees with
  ``measures`` to about 1e-10.

Post-processing variants (``Transform``): ``none``; ``standardize`` (``geometry.standardize``: each
dimension z-scored with the layer's mean and population standard deviation, constant dimensions 0);
``abtt`` (``geometry.abtt``: mean removed, then the top d/100 principal directions of the layer's
covariance). A variant's measures are the paper's measures of the transformed vectors.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg

from contextuality.measure import geometry
from contextuality.measure import reference

# Rows per block of the full-layer passes (whole sentences; float32 blocks of 3 MiB at d = 384). Blocks and
# batches are sized so that the several passes over each stay in cache (L3) even with two layers measured at
# once: 8192-row blocks and 32 MiB batches made the whole measurement step about 17% slower on 2 cores.
BLOCK_ROWS = 2048
# Rows whose float64 mean is the point the layer's moments are taken around (``layer_pass``): a sample
# spares a full pass over the layer.
SHIFT_ROWS = 1 << 16
# Lanczos steps per round, rounds before LAPACK takes over, and the accepted residual |A x - theta x| /
# theta of a top eigenpair (float32 arithmetic reaches about 1e-7; the eigenvalue is then good to the
# same relative accuracy, far below the 3 decimals the measures are reported to). On the default
# models' word matrices 12 steps settle nearly every top eigenpair to 1e-7 (a restart the rest).
LANCZOS_STEPS = 12
LANCZOS_ROUNDS = 6
RESIDUAL_TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-11}
# Gram matrices of at most this many rows get their spectra from LAPACK (cheaper than Lanczos there).
LAPACK_MAX = 24
# Words with at most this many occurrences are stacked by exact size; larger ones up to d are padded to
# a multiple of PAD_STEP (zero rows and columns leave the top eigenpair unchanged).
STACK_MAX = 48
PAD_STEP = 32
# Upper bound on the elements of one stacked batch (4 MiB in float32).
BATCH_ELEMENTS = 1 << 20

VARIANTS = ("none", "standardize", "abtt")


# --------------------------------------------------------------------------------------------------
# Batched top eigenpairs


def _generic_start(m: int) -> np.ndarray:
    """A fixed start vector, not orthogonal to any particular eigenvector (the one ``measures`` uses)."""
    return reference._lanczos_start(m)


def _lanczos(A: np.ndarray, start: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Top Ritz pair of each symmetric matrix of A (k, m, m) after ``steps`` Lanczos steps from ``start``.

    Full re-orthogonalisation (classical Gram-Schmidt, twice), so the basis stays orthonormal in float32.
    A basis vector of norm 0 (the Krylov space is exhausted: the Ritz pair is exact) stays 0.
    """
    k, m, _ = A.shape
    s = min(steps, m)
    dtype = A.dtype
    Q = np.zeros((k, s, m), dtype=dtype)
    alpha = np.zeros((k, s))
    beta = np.zeros((k, s))
    norms = np.linalg.norm(start, axis=1, keepdims=True)
    q = (start / np.where(norms > 0, norms, 1.0)).astype(dtype)
    tiny = np.finfo(dtype).eps
    for j in range(s):
        Q[:, j] = q
        w = np.matmul(A, q[:, :, None])[:, :, 0]
        basis = Q[:, : j + 1]
        for sweep in range(2):
            c = np.einsum("kjm,km->kj", basis, w)
            w -= np.einsum("kjm,kj->km", basis, c)
            alpha[:, j] += c[:, j]
        b = np.linalg.norm(w.astype(np.float64), axis=1)
        beta[:, j] = b
        scale = np.abs(alpha[:, : j + 1]).max(axis=1) + beta[:, j]
        live = b > 64 * tiny * np.maximum(scale, np.finfo(np.float64).tiny)
        q = np.where(live[:, None], w / np.where(live, b, 1.0)[:, None].astype(dtype), 0).astype(dtype)
    T = np.zeros((k, s, s))
    idx = np.arange(s)
    T[:, idx, idx] = alpha
    T[:, idx[:-1], idx[1:]] = beta[:, : s - 1]
    T[:, idx[1:], idx[:-1]] = beta[:, : s - 1]
    values, vectors = np.linalg.eigh(T)
    x = np.matmul(vectors[:, None, :, -1].astype(dtype), Q)[:, 0, :].astype(np.float64)
    return values[:, -1], x


def top_eigenpairs(A: np.ndarray, start: np.ndarray | None = None, mask: np.ndarray | None = None, *,
                   tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Largest eigenvalue and a unit eigenvector of each symmetric positive semi-definite matrix of A (k, m, m).

    Batched Lanczos (float64 tridiagonal, A's own dtype for the products), restarted from the current
    Ritz vector until |A x - theta x| <= tol * theta (``RESIDUAL_TOL`` of A's dtype by default); matrices
    still unsettled after ``LANCZOS_ROUNDS`` rounds get LAPACK's answer in float64, zero matrices 0.
    ``start`` (k, m): start vectors (default: a fixed generic vector); a small generic part is added so
    that no start is orthogonal to the top eigenvector. ``mask`` (k, m) bool: the coordinates in use
    (zero-padded matrices); starts are kept inside them. Returns values (k,) and vectors (k, m), float64.
    """
    A = np.asarray(A)
    k, m, _ = A.shape
    values, vectors = np.zeros(k), np.zeros((k, m))
    if k == 0 or m == 0:
        return values, vectors
    tol = RESIDUAL_TOL.get(A.dtype, RESIDUAL_TOL[np.dtype(np.float64)]) if tol is None else tol
    mask = np.ones((k, m), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    generic = np.where(mask, _generic_start(m), 0.0)
    generic /= np.maximum(np.linalg.norm(generic, axis=1, keepdims=True), np.finfo(np.float64).tiny)
    start = generic.copy() if start is None else np.where(mask, np.asarray(start, dtype=np.float64), 0.0)
    norms = np.linalg.norm(start, axis=1, keepdims=True)
    start = np.where(norms > 0, start / np.where(norms > 0, norms, 1.0), generic) + 1e-3 * generic
    todo = np.arange(k)
    for _ in range(LANCZOS_ROUNDS):
        if not len(todo):
            break
        batch = A[todo] if len(todo) < k else A
        theta, x = _lanczos(batch, start[todo], LANCZOS_STEPS)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        xw = x.astype(A.dtype)
        product = np.matmul(batch, xw[:, :, None])[:, :, 0]
        residual = np.linalg.norm((product - theta[:, None].astype(A.dtype) * xw).astype(np.float64), axis=1)
        done = (residual <= tol * theta) & (theta > 0)
        values[todo[done]], vectors[todo[done]] = theta[done], x[done]
        start[todo[~done]] = x[~done] + 1e-3 * generic[todo[~done]]
        todo = todo[~done]
    for i in todo:  # unsettled, or a zero matrix
        matrix = np.asarray(A[i], dtype=np.float64)
        if not matrix.any():
            values[i], vectors[i] = 0.0, generic[i]
            continue
        w, v = scipy.linalg.eigh(matrix, subset_by_index=[m - 1, m - 1], check_finite=False)
        values[i], vectors[i] = w[0], v[:, 0]
    return values, vectors


# --------------------------------------------------------------------------------------------------
# Post-processing transforms


class Transform(NamedTuple):
    """x -> Q diag(scale) (x - shift), with Q = I - axes^T axes; ``none`` is the identity (all None)."""

    name: str
    shift: np.ndarray | None = None  # (d,) float64
    scale: np.ndarray | None = None  # (d,) float64; 0 for a constant dimension
    axes: np.ndarray | None = None  # (D, d) float64, orthonormal rows

    @property
    def identity(self) -> bool:
        return self.shift is None and self.scale is None and self.axes is None

    def rows(self, X: np.ndarray, dtype) -> np.ndarray:
        """The transformed rows (any leading shape, last axis d) in ``dtype``."""
        if self.identity:
            return np.asarray(X, dtype=dtype)
        return self._linear_in_place(np.asarray(X, dtype=dtype) - self.shift.astype(dtype), dtype)

    def vector(self, v: np.ndarray) -> np.ndarray:
        """The transform of points v (float64)."""
        return self.rows(np.asarray(v, dtype=np.float64), np.float64)

    def linear_rows(self, C: np.ndarray, dtype) -> np.ndarray:
        """The linear part applied to rows C (any leading shape, last axis d) in ``dtype``, as a new array:
        centred rows of the transformed vectors from centred rows of the stored ones."""
        return self._linear_in_place(np.array(C, dtype=dtype), dtype)

    def _linear_in_place(self, Y: np.ndarray, dtype) -> np.ndarray:
        if self.scale is not None:
            Y *= self.scale.astype(dtype)
        if self.axes is not None:
            axes = self.axes.astype(dtype)
            Y -= (Y @ axes.T) @ axes
        return Y

    def linear(self, v: np.ndarray) -> np.ndarray:
        """The linear part applied to vectors v (..., d): differences of points, centred rows."""
        v = np.asarray(v, dtype=np.float64)
        if self.scale is not None:
            v = v * self.scale
        if self.axes is not None:
            v = v - (v @ self.axes.T) @ self.axes
        return v

    def sandwich(self, S: np.ndarray) -> np.ndarray:
        """A S A^T for symmetric S (..., d, d), A the linear part (scatter matrices of transformed rows)."""
        S = np.asarray(S, dtype=np.float64)
        if self.scale is not None:
            S = S * self.scale[:, None] * self.scale[None, :]
        if self.axes is not None:
            U = self.axes
            SU = S @ U.T  # (..., d, D)
            S = S - SU @ U - np.swapaxes(SU @ U, -1, -2) + U.T @ (U @ SU) @ U
        return S


# --------------------------------------------------------------------------------------------------
# Full-layer passes


class CosineSums(NamedTuple):
    """Unit-row sums of one variant over a whole layer (the exact cosine baselines and rogue contributions)."""

    sum_unit: np.ndarray  # sum of u_i over nonzero rows (d,)
    sum_weighted: np.ndarray  # sum of p_i u_i (d,)
    sum_weighted_sq: np.ndarray  # sum of p_i^2 u_i^2 per dimension (d,)
    n_nonzero: int
    p_nonzero: float  # sum of p_i over nonzero rows
    p2_nonzero: float  # sum of p_i^2 over nonzero rows
    p4_nonzero: float  # sum of p_i^4 over nonzero rows
    sentence_sq: float  # sum over sentences of |sum_{i in s} u_i / len_s|^2
    w_sum: float  # sum over sentences of (nonzero rows) / len_s
    w2_sum: float


class LayerPass(NamedTuple):
    """What one pass over a layer's rows gives (``layer_pass``)."""

    n_rows: int
    n_sentences: int  # sentences with at least one row (S)
    shift: np.ndarray  # (d,) the point the moments are taken around
    uniform_first: np.ndarray  # sum of (x_i - shift)
    uniform_second: np.ndarray  # sum of (x_i - shift)(x_i - shift)^T
    weighted_total: float  # sum of p_i (1 up to rounding)
    weighted_first: np.ndarray  # sum of p_i (x_i - shift)
    weighted_second: np.ndarray  # sum of p_i (x_i - shift)(x_i - shift)^T
    cosines: CosineSums  # of the stored vectors (variant ``none``)
    constant: np.ndarray  # bool (d,): dimensions with one value in every row (variance exactly 0)

    @property
    def mean(self) -> np.ndarray:
        return self.shift + self.uniform_first / self.n_rows

    @property
    def covariance(self) -> np.ndarray:
        """The layer's covariance (population, uniform over rows)."""
        offset = self.uniform_first / self.n_rows
        return self.uniform_second / self.n_rows - np.outer(offset, offset)


def _length_classes(offsets: np.ndarray):
    """(length L, sentence ids of that length) for every stored sentence length L > 0, ascending."""
    lengths = np.diff(offsets)
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
    for ids in np.split(order, bounds):
        if len(ids) and lengths[ids[0]] > 0:
            yield int(lengths[ids[0]]), ids


def _class_blocks(offsets: np.ndarray, block_rows: int):
    """(L, row indices (n_s * L,)) blocks of whole sentences of one length, every stored row once."""
    for length, ids in _length_classes(offsets):
        per_block = max(1, block_rows // length)
        for a in range(0, len(ids), per_block):
            chunk = ids[a : a + per_block]
            yield length, (offsets[chunk][:, None] + np.arange(length)).reshape(-1)


def _cosine_block(Y: np.ndarray, length: int, p: float, acc: dict, squares: bool = True) -> None:
    """Add one block of transformed rows (whole sentences of ``length`` rows, weight p each) to ``acc``.

    Sums of unit rows are products with the inverse norms (BLAS), not sums of a unit-row copy.
    ``squares``: also the per-dimension sums of p_i^2 u_i^2 (the rogue dimensions; stored vectors only).
    """
    squared = np.einsum("ij,ij->i", Y, Y)
    nonzero = squared > 0
    inverse = np.zeros(len(Y), dtype=Y.dtype)
    inverse[nonzero] = 1.0 / np.sqrt(squared[nonzero])
    column = (inverse @ Y).astype(np.float64)
    acc["sum_unit"] += column
    acc["sum_weighted"] += p * column
    if squares:
        acc["sum_weighted_sq"] += p * p * (np.square(inverse) @ np.square(Y)).astype(np.float64)
    count = int(nonzero.sum())
    acc["n_nonzero"] += count
    acc["p_nonzero"] += p * count
    acc["p2_nonzero"] += p * p * count
    acc["p4_nonzero"] += p**4 * count
    d = Y.shape[1]
    sentence = np.matmul(inverse.reshape(-1, 1, length), Y.reshape(-1, length, d))[:, 0, :].astype(np.float64) / length
    acc["sentence_sq"] += float(np.einsum("sd,sd->", sentence, sentence))
    w = nonzero.reshape(-1, length).sum(axis=1) / length
    acc["w_sum"] += float(w.sum())
    acc["w2_sum"] += float(w @ w)


def _new_cosine_acc(d: int) -> dict:
    return {"sum_unit": np.zeros(d), "sum_weighted": np.zeros(d), "sum_weighted_sq": np.zeros(d), "n_nonzero": 0,
            "p_nonzero": 0.0, "p2_nonzero": 0.0, "p4_nonzero": 0.0, "sentence_sq": 0.0, "w_sum": 0.0, "w2_sum": 0.0}  # fmt: skip


def _sentence_count(offsets: np.ndarray) -> int:
    return int(np.count_nonzero(np.diff(offsets)))


def layer_pass(X: np.ndarray, offsets: np.ndarray, work_dtype=np.float32, block_rows: int = BLOCK_ROWS, *,
               rogue: bool = True) -> LayerPass:
    """One pass over every row of a layer: moments (uniform and the paper's weights) and unit-row sums.

    Rows are visited by sentence length class, whole sentences per block, converted once to
    ``work_dtype``. p_i = 1 / (S len(s_i)) as in ``measures.exact_baseline``. The scatter matrices are
    taken around ``shift``, the float64 column mean of the first ``SHIFT_ROWS`` rows: near the layer's
    mean, for precision, and so that a constant dimension (every row the same value, which its float64
    mean then is exactly) has variance exactly 0.
    ``rogue=False`` leaves out the per-dimension squares that only ``rogue_summary`` reads.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n, d = X.shape
    if offsets[-1] != n:
        raise ValueError(f"sentence_offsets ends at {offsets[-1]} but X has {n} rows")
    n_sentences = _sentence_count(offsets)
    shift = X[:SHIFT_ROWS].mean(axis=0, dtype=np.float64) if n else np.zeros(d)
    uniform_first, uniform_second = np.zeros(d), np.zeros((d, d))
    weighted_first, weighted_second = np.zeros(d), np.zeros((d, d))
    weighted_total = 0.0
    acc = _new_cosine_acc(d)
    current, class_first, class_second = None, np.zeros(d), np.zeros((d, d))

    def close_class():
        nonlocal weighted_total, uniform_first, uniform_second, weighted_first, weighted_second
        if current is None:
            return
        length, rows_in_class = current
        p = 1.0 / (n_sentences * length)
        uniform_first += class_first
        uniform_second += class_second
        weighted_first += p * class_first
        weighted_second += p * class_second
        weighted_total += p * rows_in_class

    for length, rows in _class_blocks(offsets, block_rows):
        if current is None or current[0] != length:
            close_class()
            current, class_first, class_second = [length, 0], np.zeros(d), np.zeros((d, d))
        Y = np.asarray(X[rows], dtype=work_dtype)
        current[1] += len(rows)
        _cosine_block(Y, length, 1.0 / (n_sentences * length), acc, squares=rogue)
        _subtract(Y, shift)
        class_first += (np.ones(len(Y), dtype=Y.dtype) @ Y).astype(np.float64)
        class_second += Y.T @ Y
    close_class()
    # every row of a constant column equals its exact mean, so the shifted column is exactly 0
    constant = np.diag(uniform_second) == 0
    return LayerPass(
        n, n_sentences, shift, uniform_first, uniform_second, weighted_total, weighted_first, weighted_second,
        CosineSums(**acc), constant,
    )  # fmt: skip


def cosine_pass(X: np.ndarray, offsets: np.ndarray, transforms: list[Transform], work_dtype=np.float32,
                block_rows: int = BLOCK_ROWS) -> dict[str, CosineSums]:
    """Unit-row sums of each transformed layer (one read of every row for all ``transforms``).

    Their ``sum_weighted_sq`` is left 0 (only the stored vectors' rogue dimensions use it). Transforms
    sharing one shift (the layer mean, for ``standardize`` and ``abtt``) share one centred copy of each
    block, each applying only its linear part to it.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_sentences = _sentence_count(offsets)
    accs = {t.name: _new_cosine_acc(X.shape[1]) for t in transforms}
    if not transforms:
        return {}
    shifts = [t.shift for t in transforms]
    shared = shifts[0] if all(v is not None and np.array_equal(v, shifts[0]) for v in shifts) else None
    for length, rows in _class_blocks(offsets, block_rows):
        block = np.asarray(X[rows], dtype=work_dtype)  # an index gather: a new array, safe to centre in place
        if shared is not None:
            _subtract(block, shared)
        for t in transforms:
            Y = t.linear_rows(block, work_dtype) if shared is not None else t.rows(block, work_dtype)
            _cosine_block(Y, length, 1.0 / (n_sentences * length), accs[t.name], squares=False)
    return {name: CosineSums(**acc) for name, acc in accs.items()}


def make_transform(name: str, passed: LayerPass) -> Transform:
    """The ``none``, ``standardize`` or ``abtt`` transform of a layer, from its pass (``geometry``'s definitions)."""
    if name == "none":
        return Transform("none")
    mean = passed.mean
    covariance = passed.covariance
    if name == "standardize":
        std = np.sqrt(np.maximum(np.diag(covariance), 0.0))
        constant = passed.constant | (std == 0)
        scale = np.where(constant, 0.0, 1.0 / np.where(constant, 1.0, std))
        return Transform("standardize", mean, scale, None)
    if name == "abtt":
        d = len(mean)
        k = min(geometry.abtt_components(d), d)
        _, vectors = np.linalg.eigh(covariance)
        axes = vectors[:, ::-1][:, :k].T.copy()
        signs = np.sign(axes[np.arange(k), np.argmax(np.abs(axes), axis=1)])
        return Transform("abtt", mean, None, axes * np.where(signs == 0, 1.0, signs)[:, None])
    raise ValueError(f"unknown post-processing {name!r}; expected one of {VARIANTS}")


def exact_cosines(sums: CosineSums, n_sentences: int) -> tuple[float, float, float]:
    """(cosine A_p, cosine_between, cosine_uniform) of ``measures.exact_baseline`` from unit-row sums."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = (sums.sum_weighted @ sums.sum_weighted - sums.p2_nonzero) / (sums.p_nonzero**2 - sums.p2_nonzero)
        total_m = n_sentences * sums.sum_weighted
        between = (total_m @ total_m - sums.sentence_sq) / (sums.w_sum**2 - sums.w2_sum)
        n = sums.n_nonzero
        uniform = (sums.sum_unit @ sums.sum_unit - n) / (n * (n - 1.0))
    return tuple(float(np.clip(v, -1.0, 1.0)) if np.isfinite(v) else float("nan") for v in (cosine, between, uniform))


def exact_baseline(passed: LayerPass, sums: CosineSums, transform: Transform, tol: float) -> reference.ExactBaseline:
    """``measures.exact_baseline`` of the transformed layer, from its pass and the variant's unit-row sums.

    The MEV values are those of the paper's weighted distribution of transformed points: mean
    A(mu_p - shift), covariance A C_p A^T; NaN when the layer is degenerate (total variance <= ``tol``
    times the mean squared norm, ``measures.degenerate_tolerance`` of the stored layer).
    """
    nan = float("nan")
    cosines = exact_cosines(sums, passed.n_sentences)
    mevs = [nan, nan, nan]
    if passed.n_sentences and passed.weighted_total > 0:
        offset = passed.weighted_first / passed.weighted_total
        covariance = transform.sandwich(passed.weighted_second / passed.weighted_total - np.outer(offset, offset))
        mean = transform.vector(passed.shift + offset)
        second = covariance + np.outer(mean, mean)
        total_var, total_sq = float(np.trace(covariance)), float(np.trace(second))
        if total_var > tol * total_sq:
            top_value, v1 = reference._top_eigenpair(second, mean)
            centred_top, _ = reference._top_eigenpair(covariance, reference._lanczos_start(len(mean)))
            mevs = [min(float(v1 @ covariance @ v1) / total_var, 1.0), min(centred_top / total_var, 1.0),
                    min(top_value / total_sq, 1.0)]  # fmt: skip
    return reference.ExactBaseline(*cosines, *mevs, sums.n_nonzero, passed.n_sentences)


def rogue_summary(passed: LayerPass, d: int) -> geometry.RogueSummary:
    """``geometry.rogue_dimensions`` of the stored layer with the paper's weights p_i, from its pass.

    The contributions sum to ``exact_cosines(...)[0]``, the exact anisotropy A_p.
    """
    sums = passed.cosines
    nan = np.full(d, np.nan)
    total_weight = sums.p_nonzero
    if total_weight <= 0 or sums.n_nonzero < 1:
        contributions = nan
    else:
        p_squared = sums.p2_nonzero / total_weight**2
        if p_squared >= 1.0 - 1e-12:
            contributions = nan
        else:
            s, q = sums.sum_weighted / total_weight, sums.sum_weighted_sq / total_weight**2
            contributions = (s * s - q) / (1.0 - p_squared)
    noise = _weighted_noise(sums, d)
    shares, named = geometry.rogue_shares(contributions, noise)
    return geometry.RogueSummary(contributions, float(np.sum(contributions)), noise, named, shares)


def _weighted_noise(sums: CosineSums, d: int) -> float:
    """``geometry.anisotropy_noise`` with the nonzero rows' weights p_i, from their power sums."""
    total = sums.p_nonzero
    if total <= 0:
        return float("nan")
    p2, p4 = sums.p2_nonzero / total**2, sums.p4_nonzero / total**4
    if p2 >= 1.0 - 1e-12:
        return float("nan")
    return float(np.sqrt(max(2.0 * (p2 * p2 - p4) / d, 0.0)) / (1.0 - p2))


# --------------------------------------------------------------------------------------------------
# Per-word measures


class WordStats(NamedTuple):
    """Per-word measures of one variant, aligned with the occurrence index's words."""

    self_similarity: np.ndarray  # exact mean cosine over ordered pairs i != j (``measures.self_similarity_exact``)
    mev: np.ndarray  # the paper's MEV (TruncatedSVD variant); NaN for degenerate words
    mev_literal: np.ndarray
    mev_centered: np.ndarray
    first_vector: np.ndarray | None  # (k, d) uncentred top right singular vector (variant ``none`` only)
    degenerate: np.ndarray  # bool (k,): ``measures.degenerate_words`` of the stored vectors


def _new_word_stats(k: int, d: int, with_vectors: bool) -> dict:
    nan = lambda: np.full(k, np.nan)  # noqa: E731
    return {"self_similarity": nan(), "mev": nan(), "mev_literal": nan(), "mev_centered": nan(),
            "first_vector": np.full((k, d), np.nan) if with_vectors else None,
            "total_var": nan(), "mean_sq": nan()}  # fmt: skip


SELF_SIMILARITY_CHUNK = 1024


def _self_similarity_rows(Y: np.ndarray) -> float:
    """Exact self-similarity of one word's rows (n, d): (|sum u_i|^2 - n) / (n (n - 1)) over nonzero rows.

    In float64, a chunk of rows at a time: the sum of n unit rows carries no float32 rounding, so a word
    whose occurrences are one vector has self-similarity 1 to machine precision.
    """
    total, count = np.zeros(Y.shape[1]), 0.0
    for start in range(0, len(Y), SELF_SIMILARITY_CHUNK):
        chunk = np.asarray(Y[start : start + SELF_SIMILARITY_CHUNK], dtype=np.float64)
        squared = np.einsum("ij,ij->i", chunk, chunk)
        nonzero = squared > 0
        inverse = np.zeros(len(chunk))
        inverse[nonzero] = 1.0 / np.sqrt(squared[nonzero])
        total += inverse @ chunk
        count += float(nonzero.sum())
    if count < 2:
        return float("nan")
    return float(np.clip((total @ total - count) / (count * count - count), -1.0, 1.0))


def _subtract(Y: np.ndarray, v: np.ndarray) -> None:
    """Y -= v in place, v in float64 and Y in float32 (or float64), v broadcast over rows: v is split into
    its float32 value and the rounding remainder, subtracted one after the other, so each result is
    accurate to its own rounding, not to that of |v| (near-duplicate rows keep their spread)."""
    high = v.astype(Y.dtype)
    Y -= np.expand_dims(high, -2)
    if Y.dtype != np.float64:
        Y -= np.expand_dims((v - high).astype(Y.dtype), -2)


def _finish_words(out: dict, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean,
                  with_vectors: bool) -> None:
    """MEV variants (``measures._finish``) of a batch of words from their spectra, written into ``out``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mev"][words] = np.minimum(projected_var / total_var, 1.0)
        out["mev_centered"][words] = np.minimum(centred_top / (total_var * n), 1.0)
        out["mev_literal"][words] = np.minimum(np.maximum(theta, 0.0) / (mean_sq * n), 1.0)
    out["total_var"][words], out["mean_sq"][words] = total_var, mean_sq
    if with_vectors:
        v1 = v1 / np.maximum(np.linalg.norm(v1, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        v1 *= np.where(np.einsum("kd,kd->k", v1, mean) < 0, -1.0, 1.0)[:, None]
        out["first_vector"][words] = v1


def _gram_batch(out: dict, words, C, row_sq, valid, n, mean, work_dtype, skip_tol, with_vectors) -> None:
    """Words of at most d occurrences, stacked (k, m, d) and zero-padded to m rows: Gram-matrix route.

    ``C`` holds the explicitly centred rows (padding rows 0), ``valid`` (k, m) marks real rows, ``mean``
    (k, d) float64 the words' means, ``row_sq`` (k, m) the squared norms of the uncentred rows (which
    rows are zero; None: the diagonal of the uncentred Gram matrix decides, for a variant's rows, which
    are not formed). X X^T follows from the centred Gram matrix by the mean's terms. Words with total_var
    <= skip_tol * mean_sq get no centred spectrum (their MEV is NaN anyway). Matrices of at most
    ``LAPACK_MAX`` rows are solved by LAPACK, larger ones by ``top_eigenpairs``.
    """
    e = valid.astype(work_dtype)
    padded = not valid.all()
    gram_c = np.matmul(C, np.swapaxes(C, 1, 2))
    a = np.matmul(C, mean.astype(work_dtype)[:, :, None])[:, :, 0]
    mean_norm2 = np.einsum("kd,kd->k", mean, mean)
    gram = gram_c.copy()
    gram += a[:, :, None]
    gram += a[:, None, :]
    gram += mean_norm2.astype(work_dtype)[:, None, None]
    if padded:  # padding rows and columns stay 0
        gram *= e[:, :, None]
        gram *= e[:, None, :]
    total_var = np.trace(gram_c, axis1=1, axis2=2, dtype=np.float64) / n
    mean_sq = total_var + mean_norm2
    # self-similarity from the normalised Gram matrix: sum_{i != j} cos = d^T G d - (nonzero rows), with
    # d_i = 1 / sqrt(G_ii) (so identical rows have cosine exactly 1); zero rows (from ``row_sq``: G_ii of a
    # zero row is a rounding residue) are left out
    diagonal = np.einsum("kmm->km", gram).astype(np.float64)
    nonzero = valid & (diagonal > 0)
    if row_sq is not None:
        nonzero &= np.asarray(row_sq) > 0
    inverse = np.where(nonzero, 1.0 / np.sqrt(np.where(nonzero, diagonal, 1.0)), 0.0)
    count = nonzero.sum(axis=1).astype(np.float64)
    pairs = count * count - count
    inverse_w = inverse.astype(work_dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        sums = np.einsum("ki,ki->k", inverse, np.matmul(gram, inverse_w[:, :, None])[:, :, 0].astype(np.float64)) - count
        out["self_similarity"][words] = np.where(pairs > 0, np.clip(sums / pairs, -1.0, 1.0), np.nan)
    centred_top = np.full(len(words), np.nan)
    live = total_var > skip_tol * mean_sq
    if C.shape[1] <= LAPACK_MAX:
        values, vectors = np.linalg.eigh(gram)
        theta, u1 = values[:, -1].astype(np.float64), vectors[:, :, -1].astype(np.float64)
        if live.any():
            centred_top[live] = np.linalg.eigvalsh(gram_c[live])[:, -1]
    else:
        theta, u1 = top_eigenpairs(gram, np.matmul(gram, e[:, :, None])[:, :, 0], valid)
        if live.any():
            centred_top[live], _ = top_eigenpairs(gram_c[live], None, valid[live])
    # C v1 = C X^T u1 / sigma_1 = (G_c + a 1^T) u1 / sigma_1
    u1w = u1.astype(work_dtype)
    projected = np.matmul(gram_c, u1w[:, :, None])[:, :, 0].astype(np.float64) + a.astype(np.float64) * (u1 * valid).sum(axis=1)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        projected_var = np.einsum("km,km->k", projected, projected) / (np.maximum(theta, 0.0) * n)
    v1 = None
    if with_vectors:
        v1 = np.matmul(u1w[:, None, :], C)[:, 0, :].astype(np.float64) + mean * (u1 * valid).sum(axis=1)[:, None]
    _finish_words(out, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean, with_vectors)


def _scatter_batch(out: dict, words, scatters, means, n, self_similarity, work_dtype, skip_tol,
                   with_vectors) -> None:
    """Words of more than d occurrences from their centred scatter matrices (k, d, d, work dtype) and means."""
    k, d, _ = scatters.shape
    total_var = np.trace(scatters, axis1=1, axis2=2, dtype=np.float64) / n
    mean_norm2 = np.einsum("kd,kd->k", means, means)
    mean_sq = total_var + mean_norm2
    outer = (np.sqrt(n)[:, None] * means).astype(work_dtype)
    uncentred = scatters + outer[:, :, None] * outer[:, None, :]
    theta, v1 = top_eigenpairs(uncentred, means)
    centred_top = np.full(k, np.nan)
    live = total_var > skip_tol * mean_sq
    if live.any():
        centred_top[live], _ = top_eigenpairs(scatters[live])
    v1w = v1.astype(work_dtype)
    projected_var = np.einsum("kd,kd->k", v1, np.matmul(scatters, v1w[:, :, None])[:, :, 0].astype(np.float64)) / n
    out["self_similarity"][words] = self_similarity
    _finish_words(out, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, means, with_vectors)


def word_stats(X: np.ndarray, rows: np.ndarray, group_starts: np.ndarray, transforms: list[Transform], *,
               degenerate_tol: float, work_dtype=np.float32, first_vectors: bool = True) -> dict[str, WordStats]:
    """Self-similarity and the MEV variants of every word, for the stored vectors and each variant.

    ``X`` is the layer (any float dtype); word i's occurrences are ``X[rows[group_starts[i]:group_starts[i + 1]]]``.
    Each word's rows are gathered and converted to ``work_dtype`` once; every transform is applied to
    them (its scatter matrix, for words of more than d occurrences, from the word's own). Degenerate
    words are those of the stored vectors (``measures.degenerate_words`` with ``degenerate_tol``): their
    MEV variants are NaN in every variant (an affine map gives rows identical up to storage rounding no
    spread beyond rounding). ``first_vectors``: the first singular vectors of the untransformed words
    (of the first transform, which should be ``none``).
    """
    if not transforms or not transforms[0].identity:
        raise ValueError("word_stats needs the untransformed vectors ('none') as its first transform")
    rows = np.asarray(rows, dtype=np.int64)
    group_starts = np.asarray(group_starts, dtype=np.int64)
    k, d = len(group_starts), X.shape[1]
    sizes = reference.group_sizes(group_starts, len(rows))
    outs = {t.name: _new_word_stats(k, d, first_vectors and i == 0) for i, t in enumerate(transforms)}
    limit = min(STACK_MAX, d)

    def gram_route(words, block, valid, n):
        """Words stacked (k, m, d), zero-padded: the stored vectors centred once (in place); a variant's
        centred rows are its linear part applied to them (the shift cancels) and its mean the transform
        of their float64 mean, so no variant re-reads, re-sums or re-centres the rows."""
        # the mean of the rows themselves (float64), so that centring leaves no offset
        m = block.sum(axis=1, dtype=np.float64) / n[:, None]
        row_sq = np.einsum("kmd,kmd->km", block, block)
        _subtract(block, m)
        if not valid.all():
            block *= valid[:, :, None]
        for i, t in enumerate(transforms):
            if t.identity:
                C, mean, zero_rows = block, m, row_sq
            else:  # padding rows stay 0 under a linear map
                C, mean, zero_rows = t.linear_rows(block, work_dtype), t.vector(m), None
            _gram_batch(outs[t.name], words, C, zero_rows, valid, n.astype(np.float64), mean, work_dtype,
                        degenerate_tol if i == 0 else 0.0, first_vectors and i == 0)

    # stacked by size (no padding)
    for size in np.unique(sizes[(sizes > 0) & (sizes <= limit)]):
        chosen = np.flatnonzero(sizes == size)
        per_batch = max(1, BATCH_ELEMENTS // (size * d))
        for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
            block = np.asarray(X[rows[group_starts[batch, None] + np.arange(size)]], dtype=work_dtype)
            gram_route(batch, block, np.ones((len(batch), size), dtype=bool), np.full(len(batch), size))

    # up to d occurrences: padded to a multiple of PAD_STEP rows
    medium = np.flatnonzero((sizes > limit) & (sizes <= d))
    bins = np.minimum(-(-sizes[medium] // PAD_STEP) * PAD_STEP, d)
    for m in np.unique(bins):
        chosen = medium[bins == m]
        per_batch = max(1, BATCH_ELEMENTS // (int(m) * d))
        for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
            n = sizes[batch]
            valid = np.arange(m)[None, :] < n[:, None]
            index = np.where(valid, group_starts[batch, None] + np.minimum(np.arange(m), n[:, None] - 1), 0)
            block = np.asarray(X[rows[index]], dtype=work_dtype)
            block *= valid[:, :, None]
            gram_route(batch, block, valid, n)

    # more than d occurrences: scatter matrices, one word at a time, solved in batches
    large = np.flatnonzero(sizes > d)
    per_batch = max(1, BATCH_ELEMENTS // (d * d))
    for batch in np.array_split(large, max(1, -(-len(large) // per_batch))) if len(large) else []:
        collected = {t.name: ([], [], []) for t in transforms}
        for word in batch:
            # an index gather is a new array already: centred in place below without a second copy
            block = np.asarray(X[rows[group_starts[word]:group_starts[word] + sizes[word]]], dtype=work_dtype)
            mean = block.sum(axis=0, dtype=np.float64) / len(block)
            for t in transforms[1:]:
                collected[t.name][1].append(t.vector(mean))
                collected[t.name][2].append(_self_similarity_rows(t.rows(block, work_dtype)))
            collected[transforms[0].name][1].append(mean)
            collected[transforms[0].name][2].append(_self_similarity_rows(block))
            _subtract(block, mean)
            scatter = block.T @ block
            for t in transforms:
                collected[t.name][0].append(scatter if t.identity else t.sandwich(scatter).astype(work_dtype))
        for i, t in enumerate(transforms):
            scatters, means, ss = (np.array(v) for v in collected[t.name])
            _scatter_batch(outs[t.name], batch, scatters, means, sizes[batch].astype(np.float64), ss, work_dtype,
                           degenerate_tol if i == 0 else 0.0, first_vectors and i == 0)

    first = outs[transforms[0].name]
    degenerate = first["total_var"] <= degenerate_tol * first["mean_sq"]
    result = {}
    for t in transforms:
        o = outs[t.name]
        masked = [np.where(degenerate, np.nan, o[c]) for c in ("mev", "mev_literal", "mev_centered")]
        result[t.name] = WordStats(o["self_similarity"], *masked, o["first_vector"], degenerate)
    return result
