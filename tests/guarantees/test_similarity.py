"""Guarantee: the similarity engine (``measure.similarity.measures``) gives the textbook values (spec similarity-atlas 8.3,
groups 1-7), on numpy and on torch's CPU backend alike.

1. The streamed feature form equals the Gram-form references (``reference.cka_biased_gram``,
   ``cka_debiased_gram``, ``procrustes_angle_direct``, ``mutual_knn_brute``) on n <= 1,000, within and across
   models, under every variant: float64 products to 1e-10, float32 to 1e-6.
2. Invariances: CKA(X, XQ) = CKA(X, cX + b) = 1 and angle 0; CKA(X, XA) < 1.
3. Independent Gaussians: the biased estimator's floor d/(n + d), the debiased one at 0, k-NN at chance.
4. Mean-dominated rows: exact centring keeps float32 at the float64 answer; the one-pass form does not.
5. The block-row schedule and the chunk size change nothing.
6. A layer with itself: exactly 1 and 0; the within grid is symmetric.
7. The permutation null: shuffled rows look like it; the same seed gives the same bytes.
Beside them: massive rows (raw CKA near 1 between unrelated layers, unit_rows and no_massive not), k-NN ties,
the debiased self term's note, and the arguments' one-line errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from contextuality.measure.reference import measures as reference
from contextuality.measure.similarity import measures as similarity
from contextuality.measure.similarity.measures import layer_grid, permutation_null

torch = pytest.importorskip("torch")

BACKENDS = ("numpy", "torch")
VARIANTS = similarity.VARIANTS
TOLERANCE = {"float64": 1e-10, "float32": 1e-6}


def on(backend: str, layers):
    """``layers`` (a list of numpy arrays) as the backend's arrays: numpy as they are, torch as CPU tensors."""
    return list(layers) if backend == "numpy" else [torch.from_numpy(np.ascontiguousarray(x)) for x in layers]


N_ROWS = 300
MASSIVE_ROWS = slice(7, None, 64)


def related_layers(n: int, widths, *, seed: int, latent: int = 6, dtype=np.float16, offset: float = 2.0):
    """Layers sharing a latent signal (the same for every model: the rows are the same occurrences), each with
    its own map of it, noise and mean (float16, as stored)."""
    shared = np.random.default_rng(0).normal(size=(n, latent))
    rng = np.random.default_rng(seed)
    layers = []
    for width in widths:
        x = shared @ rng.normal(size=(latent, width)) + rng.normal(size=(n, width)) + offset * rng.normal(size=width)
        layers.append(x.astype(dtype))
    return layers


def with_massive_rows(layers):
    """Copies of ``layers`` whose rows 7, 71, ... carry a massive activation (|x| > 100 and > 1000 x the median
    |x|), in the middle dimension."""
    planted = [np.array(x) for x in layers]
    for x in planted:
        x[MASSIVE_ROWS, x.shape[1] // 2] = 4000.0
    return planted


@pytest.fixture(scope="module")
def models():
    """Two small models over the same 300 rows: A with 3 layers, B with 2 (widths differ)."""
    return related_layers(N_ROWS, (12, 20, 16), seed=1), related_layers(N_ROWS, (10, 24), seed=2)


def keep_of(layers_a, layers_b=None):
    """The no_massive rows of a pair of models, as the caller builds them."""
    mask = similarity.massive_row_mask(layers_a)
    return ~(mask | similarity.massive_row_mask(layers_b)) if layers_b is not None else ~mask


def references(xs, ys, variant, keep, k):
    """Every Gram-form reference of every pair, on the variant's float64 rows (mutual k-NN from each layer's
    brute-force neighbours, as ``reference.mutual_knn_brute`` counts them)."""
    xs, ys = ([reference.variant_rows(x, variant, keep) for x in layers] for layers in (xs, ys))
    near_x, near_y = ([reference.knn_brute(x, k) for x in layers] for layers in (xs, ys))
    table = {name: np.empty((len(xs), len(ys))) for name in ("cka_biased", "cka_debiased", "angle", "knn")}
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            table["cka_biased"][i, j] = reference.cka_biased_gram(x, y)
            table["cka_debiased"][i, j] = reference.cka_debiased_gram(x, y)
            table["angle"][i, j] = reference.procrustes_angle_direct(x, y)
            table["knn"][i, j] = np.mean(np.sum(near_x[i][:, :, None] == near_y[j][:, None, :], axis=(1, 2))) / k
    return table


@pytest.fixture(scope="module")
def reference_tables(models):
    """Per variant, the layers measured and the references of their within (A with A) and across (A with B)
    grids, computed once; no_massive measures the layers with massive rows planted, less those rows."""
    tables = {}
    for variant in VARIANTS:
        a, b = (with_massive_rows(m) for m in models) if variant == "no_massive" else models
        keep = keep_of(a, b) if variant == "no_massive" else None
        tables[variant] = a, b, keep, references(a, a, variant, keep, 5), references(a, b, variant, keep, 5)
    return tables


def assert_grid_matches(grid, table, atol, within):
    off = ~np.eye(*grid.cka_biased.shape, dtype=bool) if within else np.ones(grid.cka_biased.shape, bool)
    for name, expected in (("cka_biased", table["cka_biased"]), ("cka_debiased", table["cka_debiased"]),
                           ("procrustes_angle", table["angle"])):  # fmt: skip
        np.testing.assert_allclose(getattr(grid, name)[off], expected[off], rtol=0, atol=atol, err_msg=name)
    np.testing.assert_allclose(grid.procrustes_distance, np.sqrt(2 - 2 * np.cos(grid.procrustes_angle)), atol=1e-12)
    np.testing.assert_array_equal(grid.mutual_knn, table["knn"])  # neighbours are found in float64 either way


@pytest.mark.parametrize("compute_dtype", ["float64", "float32"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_1_streamed_form_equals_the_gram_references(reference_tables, backend, variant, compute_dtype):
    """All four measures, within and across, every variant (no_massive with the pair's mask), chunks of 64
    rows so that every sum is streamed."""
    a, b, keep, within_table, across_table = reference_tables[variant]
    settings = dict(variant=variant, keep=keep, compute_dtype=compute_dtype, chunk_rows=64, knn_k=5, knn_rows=None)
    within = layer_grid(on(backend, a), **settings)
    across = layer_grid(on(backend, a), on(backend, b), **settings)
    assert within.n == across.n == (N_ROWS if keep is None else keep.sum())
    assert_grid_matches(within, within_table, TOLERANCE[compute_dtype], within=True)
    assert_grid_matches(across, across_table, TOLERANCE[compute_dtype], within=False)


@pytest.mark.parametrize("variant", ["raw", "unit_rows"])
def test_1_numpy_and_torch_give_the_same_grid(models, variant):
    """float64 products: every measure within 1e-10 of the other backend's, the k-NN overlaps equal."""
    a, b = models
    grids = [layer_grid(on(backend, a), on(backend, b), variant=variant, compute_dtype="float64", knn_k=5)
             for backend in BACKENDS]  # fmt: skip
    for name in ("cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance"):
        np.testing.assert_allclose(getattr(grids[1], name), getattr(grids[0], name), atol=1e-10, rtol=0, err_msg=name)
    np.testing.assert_array_equal(grids[1].mutual_knn, grids[0].mutual_knn)


def test_1_the_mask_is_the_massive_rows(reference_tables):
    keep = reference_tables["no_massive"][2]
    np.testing.assert_array_equal(np.flatnonzero(~keep), np.arange(N_ROWS)[MASSIVE_ROWS])


@pytest.mark.parametrize("backend", BACKENDS)
def test_2_cka_is_invariant_to_rotation_scaling_and_translation(backend):
    """CKA(X, XQ) = CKA(X, 2.5 X - b) = 1 to 1e-6 (float32 products), the angle 0 to 1e-6 (float64 products:
    arccos near 1 turns float32's 1e-7 into 4e-4 rad); a general invertible map A gives CKA < 1."""
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(600, 24)) * np.linspace(0.2, 3, 24) + 5).astype(np.float32)
    q = scipy.stats.ortho_group.rvs(24, random_state=4)
    a = rng.normal(size=(24, 24))
    maps = [x @ q, 2.5 * x - rng.normal(size=24) * 10, x @ a]
    layers = on(backend, [x, *(y.astype(np.float32) for y in maps)])
    for dtype in ("float32", "float64"):
        grid = layer_grid(
            layers[:1], layers[1:], compute_dtype=dtype, measures=["cka_biased", "cka_debiased", "procrustes"]
        )
        np.testing.assert_allclose(grid.cka_biased[0, :2], 1, atol=1e-6, rtol=0)
        np.testing.assert_allclose(grid.cka_debiased[0, :2], 1, atol=1e-6, rtol=0)
        assert grid.cka_biased[0, 2] < 0.99 and grid.cka_debiased[0, 2] < 0.99 and grid.procrustes_angle[0, 2] > 0.1
        if dtype == "float64":
            np.testing.assert_allclose(grid.procrustes_angle[0, :2], 0, atol=1e-6)


@pytest.fixture(scope="module")
def independent():
    rng = np.random.default_rng(5)
    return [rng.standard_normal((20_000, 384), dtype=np.float32) for _ in range(2)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_3_independent_gaussians_sit_at_the_estimators_floors(independent, backend):
    """n = 20,000, d = 384: biased CKA within 10% of d/(n + d), debiased within 5/n of 0; mutual 10-NN within
    2e-3 of k/(n - 1) on the first 5,000 rows (all 20,000 take 16 times the time; its chance is 5e-4)."""
    x, y = on(backend, independent)
    grid = layer_grid([x], [y], knn_rows=5000)
    n, d = 20_000, 384
    assert abs(grid.cka_biased[0, 0] - d / (n + d)) <= 0.1 * d / (n + d)
    assert abs(grid.cka_debiased[0, 0]) <= 5 / n
    assert grid.knn_n == 5000 and grid.knn_k == 10
    assert abs(grid.mutual_knn[0, 0] - 10 / 4999) <= 2e-3


def one_pass_uncentred_cka(x, y):
    """The shortcut the engine refuses: X^T Y of the uncentred rows in float32, then - n mu nu^T."""
    n = len(x)
    mx, my = x.astype(np.float64).mean(axis=0), y.astype(np.float64).mean(axis=0)
    cross = lambda u, v, mu, nu: (u.T @ v).astype(np.float64) - n * np.outer(mu, nu)  # noqa: E731
    xy, xx, yy = cross(x, y, mx, my), cross(x, x, mx, mx), cross(y, y, my, my)
    return float(np.sum(xy * xy) / np.sqrt(np.sum(xx * xx) * np.sum(yy * yy)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_4_mean_dominated_rows_keep_float32_exact(backend):
    """Rows at mean 40 with spread 0.05 (float32): the float32 engine equals the float64 reference to 1e-5.
    The contrast: the uncentred one-pass float32 form misses by far more (1.27 for 0.43: its X^T X entries,
    1.6e6, round to 0.1, against a centred spread of 2.5). The reference is given the rows centred in float64
    (CKA is translation invariant): on the uncentred rows its Gram form itself loses 1.1e-4 of the debiased
    value to float64 rounding (Gram entries of 2.6e4 around a signal of 0.04), the same trap one level up."""
    rng = np.random.default_rng(6)
    z = rng.normal(size=(1000, 16))
    x = (40 + 0.05 * z).astype(np.float32)
    y = (40 + 0.05 * (0.7 * z @ rng.normal(size=(16, 16)) / 4 + 0.7 * rng.normal(size=(1000, 16)))).astype(np.float32)
    cx, cy = (u.astype(np.float64) - u.astype(np.float64).mean(axis=0) for u in (x, y))
    expected = (
        reference.cka_biased_gram(cx, cy),
        reference.cka_debiased_gram(cx, cy),
        reference.procrustes_angle_direct(x, y),
    )
    grid = layer_grid(on(backend, [x]), on(backend, [y]), compute_dtype="float32", chunk_rows=256)
    got = grid.cka_biased[0, 0], grid.cka_debiased[0, 0], grid.procrustes_angle[0, 0]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert abs(one_pass_uncentred_cka(x, y) - expected[0]) > 100 * 1e-5


@pytest.mark.parametrize("compute_dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_5_the_schedule_and_the_chunks_change_nothing(models, backend, compute_dtype):
    """A memory budget of a few kB (one A layer per block, many passes) against one block for all: every measure
    within 1e-7, within and across. Chunks of 37, 100 and 16,384 rows: within 1e-7 with float64 products; with
    float32 ones within 1e-6, the rounding of a float32 chunk sum (1.1e-7 measured here between one chunk of
    300 rows and three of 100)."""
    a, b = on(backend, models[0]), on(backend, models[1])
    widths_a, widths_b = [x.shape[1] for x in a], [y.shape[1] for y in b]
    tiny = 0.01  # MB
    assert len(similarity.block_plan(widths_a, widths_a, within=True, chunk_rows=100, itemsize=4, memory_mb=tiny)) == 3
    assert len(similarity.block_plan(widths_a, widths_b, within=False, chunk_rows=100, itemsize=4, memory_mb=2048)) == 1
    for other in (b, None):
        one_block = layer_grid(a, other, compute_dtype=compute_dtype, chunk_rows=100, memory_mb=2048)
        for settings in ({"memory_mb": tiny, "chunk_rows": 100}, {"chunk_rows": 37}, {"chunk_rows": 16384}):
            grid = layer_grid(a, other, compute_dtype=compute_dtype, **settings)
            atol = 1e-6 if compute_dtype == "float32" and "memory_mb" not in settings else 1e-7
            for name in ("cka_biased", "cka_debiased", "procrustes_angle", "mutual_knn"):
                np.testing.assert_allclose(getattr(grid, name), getattr(one_block, name), atol=atol, rtol=0,
                                           err_msg=f"{name} {settings}")  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_6_a_layer_with_itself_is_exactly_one_and_the_grid_symmetric(models, backend):
    """Within: the diagonal is exactly 1 and 0 and the grid symmetric bit for bit; across a model and a copy of
    it (another array of the same values) or the same arrays: the same. A float32 copy of a float16 layer is
    another input (another dtype): its values are computed, near 1 and 0."""
    a = on(backend, models[0])
    copies = on(backend, [np.array(x) for x in models[0]])
    for grid in (layer_grid(a), layer_grid(a, copies), layer_grid(a, a)):
        assert np.all(np.diag(grid.cka_biased) == 1.0) and np.all(np.diag(grid.cka_debiased) == 1.0)
        assert np.all(np.diag(grid.procrustes_angle) == 0.0) and np.all(np.diag(grid.procrustes_distance) == 0.0)
        assert np.all(np.diag(grid.mutual_knn) == 1.0)
    within = layer_grid(a)
    for name in ("cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance", "mutual_knn"):
        matrix = getattr(within, name)
        assert np.array_equal(matrix, matrix.T), name
    wider = on(backend, [np.asarray(models[0][0], dtype=np.float32)])
    computed = layer_grid(a[:1], wider)
    assert computed.procrustes_angle[0, 0] < 1e-3 and abs(computed.cka_debiased[0, 0] - 1) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_7_shuffled_rows_look_like_the_permutation_null(models, backend):
    """Rows of one model shuffled (a misaligned join): debiased CKA within 3 null sd of 0, the biased value within
    3 sd of the null's mean; the aligned pair lies far above its null (p = 1/(draws + 1)). The same seed gives
    the same bytes, another seed other draws, centred rows held or centred again in each draw the same values;
    numpy and torch give the same null."""
    x, y = models[0][0], models[1][1]
    shuffled = y[np.random.default_rng(8).permutation(len(y))]
    null = permutation_null(*on(backend, [x, y]), draws=30, seed=9)
    misaligned = layer_grid(on(backend, [x]), on(backend, [shuffled]), measures=["cka_biased", "cka_debiased"])
    assert abs(misaligned.cka_debiased[0, 0]) <= 3 * null.debiased_sd
    assert abs(misaligned.cka_biased[0, 0] - null.biased_mean) <= 3 * null.biased_sd
    aligned = layer_grid(on(backend, [x]), on(backend, [y]), measures=["cka_debiased"])
    assert similarity.p_value(aligned.cka_debiased[0, 0], null.debiased) == 1 / 31
    again = permutation_null(*on(backend, [x, y]), draws=30, seed=9)
    assert again.debiased.tobytes() == null.debiased.tobytes() and again.biased.tobytes() == null.biased.tobytes()
    assert not np.array_equal(permutation_null(x, y, draws=30, seed=10).debiased, null.debiased)
    streamed = permutation_null(*on(backend, [x, y]), draws=30, seed=9, memory_mb=0.01)  # centred again each draw
    np.testing.assert_allclose(streamed.debiased, null.debiased, atol=1e-12, rtol=0)
    on_numpy = permutation_null(x, y, draws=30, seed=9, compute_dtype="float64")
    on_torch = permutation_null(*on("torch", [x, y]), draws=30, seed=9, compute_dtype="float64")
    np.testing.assert_allclose(on_torch.debiased, on_numpy.debiased, atol=1e-10, rtol=0)
    np.testing.assert_allclose(on_torch.biased, on_numpy.biased, atol=1e-10, rtol=0)


def test_7_the_p_value_counts_the_draws_at_or_above():
    assert similarity.p_value(0.5, [0.1, 0.5, 0.7, 0.2]) == 3 / 5
    assert similarity.p_value(0.9, [0.1, 0.5]) == 1 / 3 and np.isnan(similarity.p_value(float("nan"), [0.1]))


def sink_pair(n_sentences: int = 200, length: int = 10, d: int = 64):
    """Two unrelated layers (independent Gaussians) whose first row of every sentence carries a massive value,
    in dimension 0 of A and 5 of B: the attention-sink rows of section 5, shared by the two layers."""
    rng = np.random.default_rng(11)
    a, b = (rng.normal(size=(n_sentences * length, d)).astype(np.float32) for _ in range(2))
    a[::length, 0], b[::length, 5] = 3000.0, 2000.0
    return a, b


@pytest.mark.parametrize("backend", BACKENDS)
def test_unit_rows_take_the_massive_rows_weight_away(backend):
    """Raw CKA of the unrelated pair is ~1 (the shared sink rows are all its variance); unit_rows brings it far
    down (what stays is the sink rows' shared direction, now one row's weight each), no_massive to 0."""
    a, b = sink_pair()
    layers = on(backend, [a]), on(backend, [b])
    raw = layer_grid(*layers, measures=["cka_biased", "cka_debiased"])
    unit = layer_grid(*layers, variant="unit_rows", measures=["cka_biased", "cka_debiased"])
    keep = ~(similarity.massive_row_mask([a]) | similarity.massive_row_mask([b]))
    kept = layer_grid(*layers, variant="no_massive", keep=keep, measures=["cka_biased", "cka_debiased"])
    assert raw.cka_biased[0, 0] > 0.99 and raw.cka_debiased[0, 0] > 0.99
    assert unit.cka_debiased[0, 0] < 0.5 * raw.cka_debiased[0, 0]
    assert abs(kept.cka_debiased[0, 0]) < 5 / kept.n


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_massive_drops_exactly_the_masked_rows(backend):
    """The mask is the sink rows, and no_massive's grid is the raw grid of the other rows (same rows, same sums)."""
    a, b = sink_pair()
    mask = similarity.massive_row_mask([a, b])
    np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(0, len(a), 10))
    dropped = layer_grid(on(backend, [a, b]), variant="no_massive", keep=~mask, chunk_rows=300, knn_rows=None)
    rest = layer_grid(on(backend, [a[~mask], b[~mask]]), chunk_rows=300, knn_rows=None)
    assert dropped.n == rest.n == len(a) - mask.sum() and dropped.knn_n == rest.knn_n
    for name in ("cka_biased", "cka_debiased", "procrustes_angle", "mutual_knn"):
        np.testing.assert_allclose(getattr(dropped, name), getattr(rest, name), atol=1e-12, rtol=0, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_ties_go_to_the_lower_row_and_match_the_brute_force(backend):
    """Duplicate rows tie (the lower index first), a zero row (a row at the mean) gets the lowest indices, and
    every other row's neighbours are the brute force's; numpy and torch give the same indices."""
    half = np.random.default_rng(12).integers(-50, 51, size=(128, 8)).astype(np.float64)
    half[[40, 41]] = half[5]
    half[100] = -half[5]
    half[77] = 0.0
    x = np.concatenate([half, -half])  # integers summing to 0: the mean is exactly 0, rows 77 and 205 are zero
    indices = similarity.knn_indices(on(backend, [x])[0], 6, chunk_rows=64)
    assert list(indices[5, :3]) == [40, 41, 228] and list(indices[228, :3]) == [5, 40, 41]  # row 228 = -half[100]
    assert list(indices[77]) == list(indices[205]) == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(indices, reference.knn_brute(x, 6))
    np.testing.assert_array_equal(indices, similarity.knn_indices(x, 6, chunk_rows=1000))
    assert similarity.mutual_knn(indices, indices) == 1.0


def test_a_self_term_at_zero_gives_nan_with_a_note():
    """Eight one-hot rows: the U-centred Gram is 0, so hsic(X, X) = 0 (computed, 7e-16): NaN and a note, never
    a clipped ratio; the biased CKA is still defined."""
    x, y = np.eye(8), np.random.default_rng(13).normal(size=(8, 3))
    for dtype in ("float32", "float64"):
        grid = layer_grid([x], [y], compute_dtype=dtype, knn_k=2)
        assert np.isnan(grid.cka_debiased[0, 0]) and grid.notes[(0, 0)] == similarity.SELF_TERM_NOTE
        assert 0 < grid.cka_biased[0, 0] <= 1
    assert np.isnan(reference.cka_debiased_gram(x, y))


def test_measures_not_asked_stay_nan(models):
    grid = layer_grid(models[0], measures=["procrustes"])
    assert np.isnan(grid.cka_biased).all() and np.isnan(grid.mutual_knn).all() and grid.knn_n == 0
    assert (np.diag(grid.procrustes_angle) == 0).all() and not np.isnan(grid.procrustes_angle).any()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a, b: layer_grid(a, [b[0][:299]]), r"layers_b: every layer must have the same 300 rows; layer 0 has 299"),
        (lambda a, b: layer_grid(a, variant="centred"), r"variant: one of raw, unit_rows, standardize, no_massive; got 'centred'"),
        (lambda a, b: layer_grid(a, measures=["cka"]), r"measures: a list of some of cka_biased, .*; got \['cka'\]"),
        (lambda a, b: layer_grid(a, keep=np.ones(299, bool)), r"keep: a bool mask of the 300 rows; got bool of shape \(299,\)"),
        (lambda a, b: layer_grid(a, variant="no_massive"), r"keep: variant 'no_massive' needs a bool mask"),
        (lambda a, b: layer_grid([x[:3] for x in a]), r"rows: at least 4 are needed .*; got 3"),
        (lambda a, b: layer_grid(a, compute_dtype="float16"), r"compute_dtype: one of float32, float64; got 'float16'"),
        (lambda a, b: permutation_null(a[0], b[0], draws=0, seed=1), r"draws: a positive number of permutations; got 0"),
        (lambda a, b: similarity.knn_indices(a[0], 300), r"k: at most the measured rows less one \(299\); got 300"),
        (lambda a, b: similarity.mutual_knn(np.zeros((5, 3)), np.zeros((5, 2))), r"indices_b: the shape of indices_a"),
    ],
)  # fmt: skip
def test_arguments_are_refused_in_one_line(models, call, message):
    with pytest.raises(ValueError, match=message) as raised:
        call(*models)
    assert "\n" not in str(raised.value)
