"""How alike two layers' representations of the same rows are, within a model and across models (spec
similarity-atlas 4.1, 4.3, 4.4): linear CKA (biased, Kornblith et al. 2019; debiased, Song et al.'s 2012
unbiased HSIC in Kornblith's feature-space form), the Procrustes angle (Williams et al. 2021), mutual k-NN
(Huh et al. 2024, ``knn``) and a row-permutation null.

``layer_grid`` measures every pair of layers, one model with itself (ℓ <= m, mirrored) or two models, on a
block-row schedule: per block of A's layers (as many as ``memory_mb`` holds), one pass over chunks of
rows accumulates X_ℓ^T [Y_1 .. Y_M] in float64, each chunk's product in the compute dtype. Per layer, a
pass of its own gives ||X^T X||_F and each row's squared norm. Every measure follows from these sums:
no n x n matrix is ever formed. The rows are the variant's, centred on the exact float64 mean first
(``rows``). For centred X (n x d_x) and Y (n x d_y):

    cka_biased   = ||X^T Y||_F^2 / (||X^T X||_F ||Y^T Y||_F)
    hsic(X, Y)   = ||X^T Y||_F^2 - n/(n-2) sum_i |x_i|^2 |y_i|^2 + ||X||_F^2 ||Y||_F^2 / ((n-1)(n-2))
    cka_debiased = hsic(X, Y) / sqrt(hsic(X, X) hsic(Y, Y))       (NaN, with a note, if a self term <= 0)
    angle        = arccos(clip(||X^T Y||_* / (||X||_F ||Y||_F), -1, 1)),  distance = sqrt(2 - 2 cos angle)

A layer with itself, or with an identical copy of itself, has CKA 1 and angle 0 exactly (set, not computed:
arccos near 1 turns float32 rounding into ~2e-4 rad). Arrays are numpy on the host or tensors on any
device (``backend``); the d x d sums come to the host in float64, where the singular values are taken.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from threadpoolctl import ThreadpoolController

from contextuality.measure.engine import backend
from contextuality.measure.similarity.knn import knn_indices, mutual_knn
from contextuality.measure.similarity.rows import (
    COMPUTE_DTYPES,
    VARIANTS,
    Centring,
    centred_chunks,
    centred_rows,
    check_choice,
    check_layers,
    check_row_count,
    chunk_bounds,
    kept_rows,
    layer_centring,
    massive_row_mask,
    same_values,
)

__all__ = ["MEASURES", "VARIANTS", "Grid", "Null", "layer_grid", "permutation_null", "p_value", "knn_indices",
           "mutual_knn", "massive_row_mask", "block_plan"]  # fmt: skip

MEASURES = ("cka_biased", "cka_debiased", "procrustes", "mutual_knn")
SELF_TERM_NOTE = "debiased self term <= 0"
# A debiased self term hsic(X, X) is a squared norm (of the U-centred Gram matrix: Szekely & Rizzo 2014), 0 for
# a constant layer or rows on a regular simplex (one-hot rows). Computed, such a 0 comes out as rounding
# (+7e-16 for 8 one-hot rows, giving a debiased "CKA" of -2.9), so a self term at most this fraction of
# ||X^T X||_F^2 counts as <= 0: NaN, with a note. Sums of float32 products carry relative errors near 1e-6.
SELF_TERM_RTOL = {"float32": 1e-5, "float64": 1e-12}
CONSTANT_NOTE = "a layer without variance"


@dataclass
class Grid:
    """Every measure of every layer pair (L_A x L_B float64 matrices; NaN where not asked or undefined)."""

    cka_biased: np.ndarray
    cka_debiased: np.ndarray
    procrustes_angle: np.ndarray  # radians
    procrustes_distance: np.ndarray  # sqrt(2 - 2 cos angle)
    mutual_knn: np.ndarray
    n: int  # rows measured
    knn_n: int = 0  # rows of the k-NN sample (0: not asked)
    knn_k: int = 0
    notes: dict = field(default_factory=dict)  # (ℓ, m) -> text

    @classmethod
    def empty(cls, shape: tuple[int, int], n: int) -> Grid:
        return cls(*(np.full(shape, np.nan) for _ in range(5)), n=n)


@dataclass
class LayerTerms:
    """Each layer's own sums (one entry per layer): what every pair's measures need beside X^T Y."""

    gram_squared: np.ndarray  # ||X^T X||_F^2
    frobenius_squared: np.ndarray  # ||X||_F^2
    row_squared: np.ndarray  # (n, L): |x_i|^2
    hsic_self: np.ndarray  # hsic(X, X)
    hsic_self_positive: np.ndarray  # hsic(X, X) > 0 beyond the rounding of its terms (``SELF_TERM_RTOL``)


def layer_terms(layers, centrings: list[Centring], chunk_rows: int, dtype: str) -> LayerTerms:
    """A pass over each layer's chunks: its d x d Gram (float64 sums of ``dtype`` products), reduced to its
    squared Frobenius norm, and its rows' float64 squared norms."""
    n = centrings[0].n_rows
    gram_squared, row_squared = np.zeros(len(layers)), np.zeros((n, len(layers)))
    for at, (x, centring) in enumerate(zip(layers, centrings)):
        xp = backend.namespace(x)
        gram = xp.zeros((x.shape[1], x.shape[1]), dtype=xp.float64, device=backend.device(x))
        for start, stop, block, squared in centred_chunks(x, centring, chunk_rows, dtype):
            gram += xp.astype(block.T @ block, xp.float64)
            row_squared[start:stop, at] = backend.to_host(squared)
        gram_squared[at] = float(xp.sum(gram * gram))
    frobenius_squared = row_squared.sum(axis=0)
    hsic_self = hsic(gram_squared, np.sum(row_squared * row_squared, axis=0), frobenius_squared**2, n)
    positive = hsic_self > SELF_TERM_RTOL[dtype] * gram_squared
    return LayerTerms(gram_squared, frobenius_squared, row_squared, hsic_self, positive)


def hsic(cross_squared, row_products, frobenius_products, n: int):
    """Song et al.'s unbiased HSIC of centred X, Y (times n (n-3)) from ||X^T Y||_F^2, sum_i |x_i|^2 |y_i|^2 and
    ||X||_F^2 ||Y||_F^2."""
    return cross_squared - n / (n - 2.0) * row_products + frobenius_products / ((n - 1.0) * (n - 2.0))


def _cka(cross_squared, row_products, a: LayerTerms, b: LayerTerms, n: int):
    """Biased and debiased CKA of every pair (broadcast: A's layers down, B's across) from the pair sums."""
    outer = lambda u, v: np.multiply.outer(u, v)  # noqa: E731
    with backend.quiet():
        biased = cross_squared / np.sqrt(outer(a.gram_squared, b.gram_squared))
        both_positive = outer(a.hsic_self_positive, b.hsic_self_positive)
        pair = hsic(cross_squared, row_products, outer(a.frobenius_squared, b.frobenius_squared), n)
        debiased = np.where(both_positive, pair / np.sqrt(np.abs(outer(a.hsic_self, b.hsic_self))), np.nan)
    return biased, debiased


def block_plan(widths_a, widths_b, *, within: bool, chunk_rows: int, itemsize: int, memory_mb: float):
    """Consecutive blocks [ℓ0, ℓ1) of A's layers, each as many as ``memory_mb`` holds (at least one): per layer
    of the block, its rows of the float64 accumulator (d_ℓ x the B columns: for a model with itself, its
    layers from ℓ0 on), its columns of the block's centred chunk and of one product (compute and float64
    copies); beside them one layer's chunk being centred (float64 and compute copies)."""
    budget, widest = memory_mb * 2**20, max(*widths_a, *widths_b)
    fixed = chunk_rows * widest * (8 + itemsize)
    blocks, first = [], 0
    while first < len(widths_a):
        columns = sum(widths_b[first:] if within else widths_b)
        last, used = first, fixed
        while last < len(widths_a):
            cost = widths_a[last] * (columns * 8 + chunk_rows * itemsize + widest * (8 + itemsize))
            if last > first and used + cost > budget:
                break
            used, last = used + cost, last + 1
        blocks.append((first, last))
        first = last
    return blocks


def _block_products(layers_a, centrings_a, layers_b, centrings_b, block, b_first, chunk_rows, dtype, within):
    """X_ℓ^T [Y_m for m >= b_first] for the A layers ℓ of ``block``, summed over chunks in float64 (on the host),
    and the first column of each layer of the block (rows) and of B (columns)."""
    first, last = block
    starts_a = np.concatenate([[0], np.cumsum([x.shape[1] for x in layers_a[first:last]])]).tolist()
    starts_b = np.concatenate([[0], np.cumsum([y.shape[1] for y in layers_b[b_first:]])]).tolist()
    xp, where = backend.namespace(layers_a[0]), backend.device(layers_a[0])
    total = xp.zeros((starts_a[-1], starts_b[-1]), dtype=xp.float64, device=where)
    for start, stop in chunk_bounds(centrings_a[0].n_rows, chunk_rows):
        rows = slice(start, stop)
        ours = xp.empty((stop - start, starts_a[-1]), dtype=backend.xp_dtype(xp, dtype), device=where)
        for at, ell in enumerate(range(first, last)):  # the block's layers side by side, each centred once
            ours[:, starts_a[at] : starts_a[at + 1]] = centred_rows(layers_a[ell], centrings_a[ell], rows, dtype)[0]
        for at, m in enumerate(range(b_first, len(layers_b))):
            if within and m < last:  # one of the block's own layers
                theirs = ours[:, starts_a[m - first] : starts_a[m - first + 1]]
            else:
                theirs = centred_rows(layers_b[m], centrings_b[m], rows, dtype)[0]
            total[:, starts_b[at] : starts_b[at + 1]] += xp.astype(ours.T @ theirs, xp.float64)
    return backend.to_host(total), starts_a, starts_b


def _pair_sums(
    layers_a, centrings_a, layers_b, centrings_b, *, within, identical, nuclear, chunk_rows, dtype, memory_mb
):
    """||X_ℓ^T Y_m||_F^2 and (``nuclear``) ||X_ℓ^T Y_m||_* of every pair (ℓ <= m within a model; NaN elsewhere
    and, for the nuclear norm, for ``identical`` pairs, whose angle is set), block by block."""
    shape = (len(layers_a), len(layers_b))
    cross_squared, nuclear_norm = np.full(shape, np.nan), np.full(shape, np.nan)
    plan = block_plan([x.shape[1] for x in layers_a], [y.shape[1] for y in layers_b], within=within,
                      chunk_rows=min(chunk_rows, centrings_a[0].n_rows), itemsize=backend.itemsize(dtype),
                      memory_mb=memory_mb)  # fmt: skip
    for block in plan:
        b_first = block[0] if within else 0
        # one call per block: its accumulator is freed before the next block's is made
        _reduce_block(cross_squared, nuclear_norm if nuclear else None, identical, block, b_first, within,
                      *_block_products(layers_a, centrings_a, layers_b, centrings_b, block, b_first, chunk_rows,
                                       dtype, within))  # fmt: skip
    return cross_squared, nuclear_norm


def _reduce_block(cross_squared, nuclear_norm, identical, block, b_first, within, sums, starts_a, starts_b) -> None:
    """Each pair's ||X^T Y||_F^2 (and nuclear norm, where asked and not ``identical``) from one block's sums."""
    products = {
        (ell, m): sums[starts_a[i] : starts_a[i + 1], starts_b[j] : starts_b[j + 1]]
        for i, ell in enumerate(range(*block))
        for j, m in enumerate(range(b_first, len(starts_b) - 1 + b_first))
        if not (within and m < ell)
    }
    for pair, product in products.items():
        cross_squared[pair] = np.sum(product * product)
    if nuclear_norm is not None:
        asked = [pair for pair in products if not identical[pair]]
        for pair, value in zip(asked, nuclear_norms([products[pair] for pair in asked])):
            nuclear_norm[pair] = value


def nuclear_norms(matrices: list[np.ndarray]) -> list[float]:
    """The sum of the singular values of each (float64, host) matrix. One BLAS thread per SVD, as many SVDs at
    once as the BLAS has threads: a 2-threaded OpenBLAS SVD of a 576 x 576 matrix took 1.0 s on a loaded
    2-core machine (its threads spin against the other processes' work), a 1-threaded one 0.045 s."""
    controller = ThreadpoolController()
    workers = max([pool["num_threads"] for pool in controller.info() if pool["user_api"] == "blas"] or [1])
    with controller.limit(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda matrix: float(np.sum(scipy.linalg.svdvals(matrix, check_finite=False))), matrices))


def identical_pairs(layers_a, centrings_a, layers_b, centrings_b, within: bool) -> np.ndarray:
    """Which pairs are one input twice (CKA 1 and angle 0 by definition): a layer with itself within a model,
    and any two layers that are the same object, or equal in shape, dtype and values. The equal-values test
    (one pass over both layers) runs only for pairs whose float64 centring is already bit-identical (the same
    input gives the same sums), so unlike layers cost nothing."""
    identical = np.zeros((len(layers_a), len(layers_b)), dtype=bool)
    for ell, (x, cx) in enumerate(zip(layers_a, centrings_a)):
        for m, (y, cy) in enumerate(zip(layers_b, centrings_b)):
            identical[ell, m] = (within and ell == m) or (cx.same_map(cy) and same_values(x, y))
    return identical


def _note(grid: Grid, where: np.ndarray, text: str) -> None:
    for ell, m in zip(*np.nonzero(where)):
        grid.notes[(int(ell), int(m))] = "; ".join(filter(None, [grid.notes.get((int(ell), int(m))), text]))


def _check_grid_arguments(layers_a, layers_b, variant, keep, measures, compute_dtype, chunk_rows, memory_mb):
    n = check_layers("layers_a", layers_a)
    if layers_b is not None:
        check_layers("layers_b", layers_b, n)
    if isinstance(measures, str) or not set(measures) <= set(MEASURES) or not measures:
        raise ValueError(f"measures: a list of some of {', '.join(MEASURES)}; got {measures!r}")
    check_choice("compute_dtype", compute_dtype, COMPUTE_DTYPES)
    if chunk_rows < 1 or not memory_mb > 0:
        raise ValueError(f"chunk_rows and memory_mb: positive; got {chunk_rows} and {memory_mb}")
    rows = kept_rows(keep, n, variant)
    check_row_count(n if rows is None else len(rows))
    return rows


def layer_grid(layers_a, layers_b=None, *, variant: str = "raw", keep=None, measures=MEASURES,
               compute_dtype: str = "float32", chunk_rows: int = 16384, memory_mb: float = 2048,
               knn_k: int = 10, knn_rows: int | None = 5000) -> Grid:  # fmt: skip
    """Every measure of every pair (ℓ of ``layers_a``, m of ``layers_b``), or of ``layers_a`` with itself.

    ``layers_a``, ``layers_b``: one n x d_ℓ array per layer, the same n rows (any float dtype; numpy or torch,
    all in one namespace). ``variant`` maps the rows (``rows``); ``keep`` (a bool per row,
    ``no_massive`` needs it) leaves out the others. ``measures``: which of ``MEASURES`` (the others stay
    NaN). ``compute_dtype`` of each chunk's products (sums, means and scalars are float64 either way),
    ``chunk_rows`` rows at a time, ``memory_mb`` for the block-row accumulators and chunks (not counting
    the layers themselves). Mutual k-NN (k = ``knn_k``) on the first ``knn_rows`` rows (None: all), those of
    them kept. Within a model the grid is symmetric and its diagonal exactly 1 (CKA) and 0 (angle); pairs
    of identical inputs too (``identical_pairs``)."""
    rows = _check_grid_arguments(layers_a, layers_b, variant, keep, measures, compute_dtype, chunk_rows, memory_mb)
    within = layers_b is None
    layers_b = layers_a if within else layers_b
    centrings_a = [layer_centring(x, variant, rows, chunk_rows) for x in layers_a]
    centrings_b = centrings_a if within else [layer_centring(y, variant, rows, chunk_rows) for y in layers_b]
    grid = Grid.empty((len(layers_a), len(layers_b)), centrings_a[0].n_rows)
    identical = identical_pairs(layers_a, centrings_a, layers_b, centrings_b, within)
    if {"cka_biased", "cka_debiased", "procrustes"} & set(measures):
        _fill_products(grid, layers_a, centrings_a, layers_b, centrings_b, within=within, identical=identical,
                       measures=measures, chunk_rows=chunk_rows, dtype=compute_dtype, memory_mb=memory_mb)  # fmt: skip
    if "mutual_knn" in measures:
        _fill_knn(grid, layers_a, None if within else layers_b, variant, keep, knn_k, knn_rows)
    if within:  # the lower triangle is the upper one's mirror
        lower = np.tril_indices(len(layers_a), -1)
        for name in ("cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance", "mutual_knn"):
            matrix = getattr(grid, name)
            matrix[lower] = matrix.T[lower]
        grid.notes.update({(m, ell): text for (ell, m), text in list(grid.notes.items()) if ell < m})
    return grid


def _fill_products(grid, layers_a, centrings_a, layers_b, centrings_b, *, within, identical, measures, chunk_rows,
                   dtype, memory_mb) -> None:  # fmt: skip
    """The CKA and Procrustes entries of ``grid`` that ``measures`` asks for (the upper triangle within a model)."""
    terms_a = layer_terms(layers_a, centrings_a, chunk_rows, dtype)
    terms_b = terms_a if within else layer_terms(layers_b, centrings_b, chunk_rows, dtype)
    cross_squared, nuclear = _pair_sums(layers_a, centrings_a, layers_b, centrings_b, within=within, identical=identical,
                                        nuclear="procrustes" in measures, chunk_rows=chunk_rows, dtype=dtype,
                                        memory_mb=memory_mb)  # fmt: skip
    biased, debiased = _cka(cross_squared, terms_a.row_squared.T @ terms_b.row_squared, terms_a, terms_b, grid.n)
    with backend.quiet():
        norms = np.sqrt(np.multiply.outer(terms_a.frobenius_squared, terms_b.frobenius_squared))
        cosine = np.clip(nuclear / norms, -1.0, 1.0)
    angle, distance = np.arccos(cosine), np.sqrt(np.maximum(2.0 - 2.0 * cosine, 0.0))
    computed = ~np.isnan(cross_squared)
    one_input = identical & computed & ~np.isnan(biased)  # a layer without variance stays NaN
    biased[one_input], angle[one_input], distance[one_input] = 1.0, 0.0, 0.0
    debiased[one_input & ~np.isnan(debiased)] = 1.0
    if "cka_biased" in measures:
        grid.cka_biased[:] = biased
    if "cka_debiased" in measures:
        grid.cka_debiased[:] = debiased
        _note(grid, computed & ~np.isnan(biased) & np.isnan(debiased), SELF_TERM_NOTE)
    if "procrustes" in measures:
        grid.procrustes_angle[:], grid.procrustes_distance[:] = angle, distance
    _note(grid, computed & np.isnan(biased), CONSTANT_NOTE)


def _fill_knn(grid: Grid, layers_a, layers_b, variant: str, keep, k: int, knn_rows: int | None) -> None:
    """Mutual k-NN of every pair on the first ``knn_rows`` rows (those kept), each layer's neighbours found once."""
    head = layers_a[0].shape[0] if knn_rows is None else min(knn_rows, layers_a[0].shape[0])
    keep_head = None if keep is None else backend.to_host(keep)[:head]
    neighbours = lambda layers: [knn_indices(x[:head], k, variant=variant, keep=keep_head) for x in layers]  # noqa: E731
    ours = neighbours(layers_a)
    theirs = ours if layers_b is None else neighbours(layers_b)
    for ell, a in enumerate(ours):
        for m, b in enumerate(theirs):
            if layers_b is not None or m >= ell:
                grid.mutual_knn[ell, m] = mutual_knn(a, b)
    grid.knn_n, grid.knn_k = len(ours[0]), k


@dataclass
class Null:
    """CKA of one pair with the rows of Y shuffled against those of X, ``draws`` times: the level a pair of
    unrelated rows reaches (the biased estimator's floor; the debiased one's is 0 by construction), and the
    misalignment check (rows joined in the wrong order look like this)."""

    biased_mean: float
    biased_sd: float  # of the draws (ddof 1; NaN for one draw)
    debiased_mean: float
    debiased_sd: float
    debiased: np.ndarray  # each draw's value
    biased: np.ndarray


def _shuffled_cross_squared(rows_x, rows_y, n: int, order: np.ndarray, chunk_rows: int) -> float:
    """||X^T Y[order]||_F^2: each chunk of X's centred rows (``rows_x(slice)``) against the centred rows of Y that
    ``order`` puts beside them (``rows_y(positions)``), in float64 sums."""
    total = None
    for start, stop in chunk_bounds(n, chunk_rows):
        ours = rows_x(slice(start, stop))
        xp = backend.namespace(ours)
        product = xp.astype(ours.T @ rows_y(order[start:stop]), xp.float64)
        total = product if total is None else total + product
    return float(xp.sum(total * total))


def _centred_layer(x, centring: Centring, chunk_rows: int, dtype: str):
    """All of ``x``'s centred measured rows in ``dtype``, as one array of its namespace and device."""
    xp = backend.namespace(x)
    rows = xp.empty((centring.n_rows, x.shape[1]), dtype=backend.xp_dtype(xp, dtype), device=backend.device(x))
    for start, stop, block, _ in centred_chunks(x, centring, chunk_rows, dtype):
        rows[start:stop, :] = block
    return rows


def permutation_null(x, y, *, draws: int, seed, variant: str = "raw", keep=None, compute_dtype: str = "float32",
                     chunk_rows: int = 16384, memory_mb: float = 2048) -> Null:  # fmt: skip
    """The row-permutation null of the pair (``x``, ``y``): ``draws`` permutations of y's measured rows from
    ``np.random.default_rng(seed)``, biased and debiased CKA of each (the same seed gives the same bytes).
    Each layer's own sums are computed once, and its centred rows held in ``compute_dtype`` when both fit
    half of ``memory_mb`` (else centred again in every draw): a draw costs one pass of X^T Y products."""
    rows = _check_grid_arguments([x], [y], variant, keep, MEASURES, compute_dtype, chunk_rows, memory_mb)
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws: a positive number of permutations; got {draws!r}")
    centring_x, centring_y = (layer_centring(layer, variant, rows, chunk_rows) for layer in (x, y))
    terms_x = layer_terms([x], [centring_x], chunk_rows, compute_dtype)
    terms_y = layer_terms([y], [centring_y], chunk_rows, compute_dtype)
    n = centring_x.n_rows
    if n * (x.shape[1] + y.shape[1]) * backend.itemsize(compute_dtype) <= memory_mb * 2**20 / 2:
        held_x, held_y = (
            _centred_layer(u, c, chunk_rows, compute_dtype) for u, c in ((x, centring_x), (y, centring_y))
        )
        rows_x, rows_y = (lambda select: held_x[select, :]), (lambda positions: backend.take_rows(held_y, positions))
    else:
        rows_x = lambda select: centred_rows(x, centring_x, select, compute_dtype)[0]  # noqa: E731
        rows_y = lambda positions: centred_rows(y, centring_y, positions, compute_dtype)[0]  # noqa: E731
    rng = np.random.default_rng(seed)
    cross_squared, row_products = np.empty(draws), np.empty(draws)
    for draw in range(draws):
        order = rng.permutation(n)
        cross_squared[draw] = _shuffled_cross_squared(rows_x, rows_y, n, order, chunk_rows)
        row_products[draw] = terms_x.row_squared[:, 0] @ terms_y.row_squared[order, 0]
    biased, debiased = (values.reshape(-1) for values in _cka(cross_squared, row_products, terms_x, terms_y, n))
    sd = lambda values: float(np.std(values, ddof=1)) if draws > 1 else float("nan")  # noqa: E731
    return Null(float(np.mean(biased)), sd(biased), float(np.mean(debiased)), sd(debiased), debiased, biased)


def p_value(observed: float, null_values) -> float:
    """(1 + #{null >= observed}) / (1 + draws): the permutation p-value, never 0 (NaN for a NaN observation)."""
    null_values = np.asarray(null_values, dtype=np.float64).reshape(-1)
    if np.isnan(observed):
        return float("nan")
    return float((1 + np.count_nonzero(null_values >= observed)) / (1 + len(null_values)))
