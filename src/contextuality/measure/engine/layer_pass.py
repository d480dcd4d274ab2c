"""The engine's passes over every row of a layer, and what follows from them without another read.

``layer_pass`` reads the layer once, in blocks of whole sentences grouped by sentence length: the unit
rows' sums give the exact cosine baselines of ``exact_baseline.exact_baseline`` and the per-dimension
contributions of ``rogue.rogue_contributions`` (the same sums); the shifted scatter matrix of each
length class gives both the layer's uniform covariance (for ``standardize`` and ``abtt``:
``make_transform``) and the paper's sentence-then-token weighted moments (the exact MEV baseline), from
one rank-k update per block. A variant's exact MEV baseline follows from these moments by its linear
map, without a pass; its exact cosine baselines need the norms of its rows (``cosine_pass``, a lighter
pass). ``exact_baseline_from_pass`` and ``rogue_summary`` turn the sums into the measures.

The pass refuses a layer holding a NaN or an infinity (``NonFiniteRows``), from the squared row norms it
forms anyway: one test per row, before any eigen-solve of the layer's measures.

Work precision: products in the work dtype (float32 by default), every sum over rows in float64.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.engine.rogue import RogueSummary, rogue_shares
from contextuality.measure.engine.transforms import VARIANTS, Transform, subtract_in_two_parts
from contextuality.measure.reference.exact_baseline import ExactBaseline
from contextuality.measure.reference.postprocess import abtt_components
from contextuality.measure.reference.word_pcs import lanczos_start, top_eigenpair

# Rows per block of the full-layer passes (whole sentences; float32 blocks of 3 MiB at d = 384). Blocks and
# batches are sized so that the several passes over each stay in cache (L3) even with two layers measured at
# once: 8192-row blocks and 32 MiB batches made the whole measurement step about 17% slower on 2 cores.
BLOCK_ROWS = 2048
# Rows whose float64 mean is the point the layer's moments are taken around (``layer_pass``): a sample
# spares a full pass over the layer.
SHIFT_ROWS = 1 << 16


class NonFiniteRows(ValueError):
    """A row of the layer holds a NaN or an infinity, or its squared norm overflows the work dtype."""

    def __init__(self, row: int):
        super().__init__(f"row {row} has a non-finite squared norm")
        self.row = row


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


def _cosine_block(Y, length: int, p: float, acc: dict, squares: bool = True, rows=None) -> None:
    """Add one block of transformed rows (whole sentences of ``length`` rows, weight p each) to ``acc``.

    Sums of unit rows are products with the inverse norms (BLAS), not sums of a unit-row copy.
    ``squares``: also the per-dimension sums of p_i^2 u_i^2 (the rogue dimensions; stored vectors only).
    ``rows``: the block's row numbers (numpy), to refuse (``NonFiniteRows``) a row whose squared norm is not
    finite. Y and ``acc`` are arrays of one backend (``backend``); the sums stay float64 arrays there.
    """
    xp = backend.namespace(Y)
    f64 = xp.float64
    squared = backend.einsum("ij,ij->i", Y, Y)
    if rows is not None and not bool(xp.all(xp.isfinite(squared))):  # a NaN or an infinity reaches its square
        raise NonFiniteRows(int(rows[np.flatnonzero(~np.isfinite(backend.to_host(squared)))[0]]))
    nonzero = squared > 0
    inverse = xp.where(nonzero, 1.0 / xp.sqrt(xp.where(nonzero, squared, 1.0)), 0.0)
    column = xp.astype(inverse @ Y, f64)
    acc["sum_unit"] += column
    acc["sum_weighted"] += p * column
    if squares:
        acc["sum_weighted_sq"] += p * p * xp.astype((inverse * inverse) @ (Y * Y), f64)
    count = xp.sum(xp.astype(nonzero, f64))
    acc["n_nonzero"] += count
    acc["p_nonzero"] += p * count
    acc["p2_nonzero"] += p * p * count
    acc["p4_nonzero"] += p**4 * count
    d = Y.shape[1]
    sentence = xp.astype((xp.reshape(inverse, (-1, 1, length)) @ xp.reshape(Y, (-1, length, d)))[:, 0, :], f64) / length
    acc["sentence_sq"] += xp.sum(sentence * sentence)
    w = xp.sum(xp.astype(xp.reshape(nonzero, (-1, length)), f64), axis=1) / length
    acc["w_sum"] += xp.sum(w)
    acc["w2_sum"] += xp.sum(w * w)


def _new_cosine_acc(like, d: int) -> dict:
    """Zero sums of ``_cosine_block`` in ``like``'s backend (float64; counts as float64, exact to 2^53)."""
    xp, where = backend.namespace(like), backend.device(like)
    acc = {
        name: xp.zeros(d, dtype=xp.float64, device=where) for name in ("sum_unit", "sum_weighted", "sum_weighted_sq")
    }
    scalars = ("n_nonzero", "p_nonzero", "p2_nonzero", "p4_nonzero", "sentence_sq", "w_sum", "w2_sum")
    return acc | {name: xp.zeros((), dtype=xp.float64, device=where) for name in scalars}


def _cosine_sums(acc: dict) -> CosineSums:
    """The sums on the host: vectors as numpy float64, counts as int, the rest as float."""
    host = {name: backend.to_host(value) for name, value in acc.items()}
    return CosineSums(**{name: int(value) if name == "n_nonzero" else float(value) if value.ndim == 0 else value
                         for name, value in host.items()})  # fmt: skip


def _sentence_count(offsets: np.ndarray) -> int:
    return int(np.count_nonzero(np.diff(offsets)))


def layer_shift(X) -> np.ndarray:
    """The point ``layer_pass`` takes the moments around: the float64 column mean of the first ``SHIFT_ROWS``
    rows of X (numpy, or a tensor on any device; its first rows suffice: a streamed layer passes them
    alone), as numpy. Raises ``NonFiniteRows``."""
    xp = backend.namespace(X)
    n, d = X.shape
    shift = (
        backend.to_host(xp.sum(X[:SHIFT_ROWS, :], axis=0, dtype=xp.float64)) / min(n, SHIFT_ROWS) if n else np.zeros(d)
    )
    if not np.isfinite(shift).all():  # a row it averages is not finite: refused before it spreads to every block
        finite = backend.to_host(xp.all(xp.isfinite(X[:SHIFT_ROWS, :]), axis=1))
        raise NonFiniteRows(int(np.flatnonzero(~finite)[0]))
    return shift


class LayerPassSums:
    """``layer_pass``'s sums, added one block of whole sentences at a time (``add``), then ``result``.

    A block is closed class by class, as one whole-layer block is, so a layer passed as one block gives
    exactly ``layer_pass``'s numbers and a layer passed in several blocks the same up to float64 rounding.
    The sums live in the backend of the first rows added (numpy, or torch on the rows' device) and come
    back to the host in ``result``.
    """

    def __init__(self, n_sentences: int, shift: np.ndarray, work_dtype=np.float32, block_rows: int = BLOCK_ROWS, *,
                 rogue: bool = True):  # fmt: skip
        self.n_sentences, self.shift, self.work_dtype, self.block_rows, self.rogue = (
            n_sentences,
            np.asarray(shift, dtype=np.float64),
            work_dtype,
            block_rows,
            rogue,
        )
        self.n_rows = 0
        self.sums = None  # made on the first block, in its backend

    def _start(self, X) -> None:
        xp, where, d = backend.namespace(X), backend.device(X), X.shape[1]
        zeros = lambda *shape: xp.zeros(shape, dtype=xp.float64, device=where)  # noqa: E731
        self.sums = {"uniform_first": zeros(d), "uniform_second": zeros(d, d), "weighted_first": zeros(d),
                     "weighted_second": zeros(d, d), "weighted_total": zeros(), "acc": _new_cosine_acc(X, d),
                     "shift": backend.like(self.shift, X, xp.float64)}  # fmt: skip

    def add(self, X, offsets: np.ndarray, first_row: int = 0) -> None:
        """Rows ``X`` (whole sentences, ``offsets`` from 0) that are the layer's rows from ``first_row`` on."""
        if self.sums is None:
            self._start(X)
        xp, sums = backend.namespace(X), self.sums
        work = backend.xp_dtype(xp, self.work_dtype)
        offsets = np.asarray(offsets, dtype=np.int64)
        d, where = X.shape[1], backend.device(X)
        current, class_first, class_second = None, None, None

        def close_class():
            nonlocal class_second
            if current is None:
                return
            length, rows_in_class = current
            p = 1.0 / (self.n_sentences * length)
            sums["uniform_first"] += class_first
            sums["uniform_second"] += class_second
            sums["weighted_first"] += p * class_first
            class_second *= p  # in place (the class is done): closed once per chunk
            sums["weighted_second"] += class_second
            sums["weighted_total"] += p * rows_in_class

        for length, rows in _class_blocks(offsets, self.block_rows):
            if current is None or current[0] != length:
                close_class()
                current = [length, 0]
                class_first = xp.zeros(d, dtype=xp.float64, device=where)
                class_second = xp.zeros((d, d), dtype=xp.float64, device=where)
            Y = xp.astype(backend.take_rows(X, rows), work)
            current[1] += len(rows)
            _cosine_block(Y, length, 1.0 / (self.n_sentences * length), sums["acc"], squares=self.rogue,
                          rows=rows + first_row)  # fmt: skip
            subtract_in_two_parts(Y, sums["shift"])
            class_first += xp.sum(Y, axis=0, dtype=xp.float64)
            class_second += xp.matrix_transpose(Y) @ Y
        close_class()
        self.n_rows += X.shape[0]

    def result(self) -> LayerPass:
        if self.sums is None:  # no rows at all
            self._start(np.zeros((0, len(self.shift))))
        host = {name: backend.to_host(value) for name, value in self.sums.items() if name not in ("acc", "shift")}
        # every row of a constant column equals its exact mean, so the shifted column is exactly 0
        constant = np.diag(host["uniform_second"]) == 0
        return LayerPass(
            self.n_rows, self.n_sentences, self.shift, host["uniform_first"], host["uniform_second"],
            float(host["weighted_total"]), host["weighted_first"], host["weighted_second"], _cosine_sums(self.sums["acc"]),
            constant,
        )  # fmt: skip


def layer_pass(
    X, offsets: np.ndarray, work_dtype=np.float32, block_rows: int = BLOCK_ROWS, *, rogue: bool = True
) -> LayerPass:
    """One pass over every row of a layer: moments (uniform and the paper's weights) and unit-row sums.

    Rows are visited by sentence length class, whole sentences per block, converted once to
    ``work_dtype``. p_i = 1 / (S len(s_i)) as in ``exact_baseline.exact_baseline``. The scatter matrices are
    taken around ``shift``, the float64 column mean of the first ``SHIFT_ROWS`` rows: near the layer's
    mean, for precision, and so that a constant dimension (every row the same value, which its float64
    mean then is exactly) has variance exactly 0.
    ``rogue=False`` leaves out the per-dimension squares that only ``rogue_summary`` reads. Raises
    ``NonFiniteRows`` (naming a row) where a row's squared norm or the shift is not finite: a NaN or an
    infinity in the layer. A layer too large for memory is passed block by block (``LayerPassSums``).
    X: numpy, or a torch tensor on any device (``backend``).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = X.shape[0]
    if offsets[-1] != n:
        raise ValueError(f"sentence_offsets ends at {offsets[-1]} but X has {n} rows")
    sums = LayerPassSums(_sentence_count(offsets), layer_shift(X), work_dtype, block_rows, rogue=rogue)
    sums.add(X, offsets)
    return sums.result()


class CosinePassSums:
    """``cosine_pass``'s sums, added one block of whole sentences at a time (``add``), then ``result``."""

    def __init__(self, n_sentences: int, d: int, transforms: list[Transform], work_dtype=np.float32,
                 block_rows: int = BLOCK_ROWS):  # fmt: skip
        self.n_sentences, self.d, self.transforms, self.work_dtype, self.block_rows = (
            n_sentences,
            d,
            transforms,
            work_dtype,
            block_rows,
        )
        self.accs = None  # made on the first block, in its backend
        shifts = [t.shift for t in transforms]
        self.shared = (
            transforms[0]
            if transforms and all(v is not None and np.array_equal(v, shifts[0]) for v in shifts)
            else None
        )

    def add(self, X, offsets: np.ndarray) -> None:
        if not self.transforms:
            return
        xp = backend.namespace(X)
        work = backend.xp_dtype(xp, self.work_dtype)
        if self.accs is None:
            self.accs = {t.name: _new_cosine_acc(X, self.d) for t in self.transforms}
        for length, rows in _class_blocks(np.asarray(offsets, dtype=np.int64), self.block_rows):
            block = xp.astype(backend.take_rows(X, rows), work)  # an index gather: a new array, safe to centre in place
            if self.shared is not None:
                subtract_in_two_parts(block, self.shared._param("shift", block, xp.float64))
            for t in self.transforms:
                Y = t.linear_rows(block, work) if self.shared is not None else t.rows(block, work)
                _cosine_block(Y, length, 1.0 / (self.n_sentences * length), self.accs[t.name], squares=False)

    def result(self) -> dict[str, CosineSums]:
        if self.accs is None:
            self.accs = {t.name: _new_cosine_acc(np.zeros(0), self.d) for t in self.transforms}
        return {name: _cosine_sums(acc) for name, acc in self.accs.items()}


def cosine_pass(
    X, offsets: np.ndarray, transforms: list[Transform], work_dtype=np.float32, block_rows: int = BLOCK_ROWS
) -> dict[str, CosineSums]:
    """Unit-row sums of each transformed layer (one read of every row for all ``transforms``).

    Their ``sum_weighted_sq`` is left 0 (only the stored vectors' rogue dimensions use it). Transforms
    sharing one shift (the layer mean, for ``standardize`` and ``abtt``) share one centred copy of each
    block, each applying only its linear part to it.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sums = CosinePassSums(_sentence_count(offsets), X.shape[1], transforms, work_dtype, block_rows)
    sums.add(X, offsets)
    return sums.result()


def make_transform(name: str, passed: LayerPass) -> Transform:
    """The ``none``, ``standardize`` or ``abtt`` transform of a layer, from its pass (``postprocess``'s definitions)."""
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
        k = min(abtt_components(d), d)
        _, vectors = np.linalg.eigh(covariance)
        axes = vectors[:, ::-1][:, :k].T.copy()
        signs = np.sign(axes[np.arange(k), np.argmax(np.abs(axes), axis=1)])
        return Transform("abtt", mean, None, axes * np.where(signs == 0, 1.0, signs)[:, None])
    raise ValueError(f"unknown post-processing {name!r}; expected one of {VARIANTS}")


def exact_cosines(sums: CosineSums, n_sentences: int) -> tuple[float, float, float]:
    """(cosine A_p, cosine_between, cosine_uniform) of ``exact_baseline.exact_baseline`` from unit-row sums."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = (sums.sum_weighted @ sums.sum_weighted - sums.p2_nonzero) / (sums.p_nonzero**2 - sums.p2_nonzero)
        total_m = n_sentences * sums.sum_weighted
        between = (total_m @ total_m - sums.sentence_sq) / (sums.w_sum**2 - sums.w2_sum)
        n = sums.n_nonzero
        uniform = (sums.sum_unit @ sums.sum_unit - n) / (n * (n - 1.0))
    return tuple(float(np.clip(v, -1.0, 1.0)) if np.isfinite(v) else float("nan") for v in (cosine, between, uniform))


def exact_baseline_from_pass(passed: LayerPass, sums: CosineSums, transform: Transform, tol: float) -> ExactBaseline:
    """``exact_baseline.exact_baseline`` of the transformed layer, from its pass and the variant's unit-row sums.

    The MEV values are those of the paper's weighted distribution of transformed points: mean
    A(mu_p - shift), covariance A C_p A^T; NaN when the layer is degenerate (total variance <= ``tol``
    times the mean squared norm, ``word_pcs.degenerate_tolerance`` of the stored layer).
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
            top_value, v1 = top_eigenpair(second, mean)
            centred_top, _ = top_eigenpair(covariance, lanczos_start(len(mean)))
            mevs = [min(float(v1 @ covariance @ v1) / total_var, 1.0), min(centred_top / total_var, 1.0),
                    min(top_value / total_sq, 1.0)]  # fmt: skip
    return ExactBaseline(*cosines, *mevs, sums.n_nonzero, passed.n_sentences)


def rogue_summary(passed: LayerPass, d: int) -> RogueSummary:
    """``rogue.rogue_dimensions`` of the stored layer with the paper's weights p_i, from its pass.

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
    shares, named = rogue_shares(contributions, noise)
    return RogueSummary(contributions, float(np.sum(contributions)), noise, named, shares)


def _weighted_noise(sums: CosineSums, d: int) -> float:
    """``rogue.anisotropy_noise`` with the nonzero rows' weights p_i, from their power sums."""
    total = sums.p_nonzero
    if total <= 0:
        return float("nan")
    p2, p4 = sums.p2_nonzero / total**2, sums.p4_nonzero / total**4
    if p2 >= 1.0 - 1e-12:
        return float("nan")
    return float(np.sqrt(max(2.0 * (p2 * p2 - p4) / d, 0.0)) / (1.0 - p2))
