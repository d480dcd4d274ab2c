"""Geometry beyond the paper (spec/geometry-metrics.md) against cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.decomposition import PCA

from contextuality.measure.engine import panel, rogue
from contextuality.measure.reference import isotropy, postprocess
from contextuality.measure.reference import measures as reference


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(11)


def unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair i != j, spelled out."""
    first, second = np.nonzero(~np.eye(n, dtype=bool))
    return first, second


def population_isoscore(variances: np.ndarray) -> float:
    v = np.asarray(variances, dtype=np.float64)
    return float((v.sum() ** 2 / (v**2).sum() - 1) / (len(v) - 1))


# ----------------------------------------------------------------------------------------------------
# rogue dimensions


def test_rogue_contributions_match_all_pairs_and_sum_to_the_mean_cosine(rng):
    X = rng.normal(size=(40, 7)) + np.array([3.0, 0, 0, -1.0, 0, 0, 0.5])
    X[5] = 0.0  # a zero row has no direction and is left out
    kept = np.delete(X, 5, axis=0)
    U = unit(kept)
    first, second = all_pairs(len(U))
    brute = (U[first] * U[second]).mean(axis=0)
    got = rogue.rogue_contributions(X)
    np.testing.assert_allclose(got, brute, rtol=0, atol=1e-14)
    assert got.sum() == pytest.approx(reference.self_similarity_exact(kept, np.array([0]))[0], abs=1e-14)


def test_weighted_rogue_contributions_match_the_double_sum(rng):
    lengths = rng.integers(1, 6, size=12)  # 12 sentences; p_i = 1 / (S len(s_i))
    weights = np.repeat(1.0 / (len(lengths) * lengths), lengths)
    X = rng.normal(size=(len(weights), 5)) + np.array([1.0, -2.0, 0, 0, 0])
    U = unit(X)
    first, second = all_pairs(len(U))
    pair_weights = weights[first] * weights[second]
    brute = (pair_weights[:, None] * U[first] * U[second]).sum(axis=0) / pair_weights.sum()
    got = rogue.rogue_contributions(X, weights)
    np.testing.assert_allclose(got, brute, rtol=0, atol=1e-14)
    # the scale of the weights does not matter; uniform weights give the unweighted contributions
    np.testing.assert_allclose(rogue.rogue_contributions(X, 7.0 * weights), got, rtol=0, atol=1e-14)
    np.testing.assert_allclose(
        rogue.rogue_contributions(X, np.full(len(X), 0.3)), rogue.rogue_contributions(X), rtol=0, atol=1e-14
    )


def test_weighted_total_is_the_expectation_of_the_papers_sampling(rng):
    """Draw a sentence uniformly, then a token in it, twice; pairs of the same occurrence excluded."""
    lengths = rng.integers(1, 8, size=30)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    X = rng.normal(size=(offsets[-1], 6)) + 0.8
    exact = rogue.rogue_contributions(X, np.repeat(1.0 / (len(lengths) * lengths), lengths)).sum()
    draws = 400_000
    sentences = rng.integers(0, len(lengths), size=(2, draws))
    rows = offsets[sentences] + np.floor(rng.random((2, draws)) * lengths[sentences]).astype(np.int64)
    distinct = rows[0] != rows[1]
    U = unit(X)
    cosines = np.einsum("ij,ij->i", U[rows[0, distinct]], U[rows[1, distinct]])
    assert cosines.mean() == pytest.approx(exact, abs=5 * cosines.std() / np.sqrt(distinct.sum()))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rogue_contributions_of_low_precision_input_match_float64(rng, dtype):
    X = (rng.normal(size=(3000, 24)) + np.linspace(-1, 2, 24)).astype(dtype)
    before = X.copy()
    got = rogue.rogue_contributions(X, rng.random(3000))
    assert np.array_equal(X, before)  # the input is not touched
    exact = rogue.rogue_contributions(X.astype(np.float64))
    # float32 blocks: a relative error of about 1e-6 of the largest contribution
    np.testing.assert_allclose(rogue.rogue_contributions(X), exact, rtol=0, atol=1e-5 * np.abs(exact).max())
    assert got.dtype == np.float64


def test_isotropic_directions_contribute_nothing_and_have_no_shares(rng):
    n, d = 4000, 16
    X = rng.normal(size=(n, d))
    summary = rogue.rogue_dimensions(X)
    assert summary.noise == pytest.approx(math.sqrt(2 / (d * n * (n - 1))))
    assert np.all(np.abs(summary.contributions) < 6 * math.sqrt(2) / (n * d))
    assert abs(summary.total) < 4 * summary.noise
    assert all(math.isnan(share) for share in summary.shares.values())
    assert len(summary.top_dims) == 0


def test_anisotropy_noise_is_the_spread_under_isotropy(rng):
    n, d, clouds = 30, 8, 3000
    U = rng.normal(size=(clouds, n, d))
    U /= np.linalg.norm(U, axis=2, keepdims=True)
    totals = (np.einsum("cnd->cd", U) ** 2).sum(axis=1) - n
    totals /= n * (n - 1)
    assert totals.std() == pytest.approx(rogue.anisotropy_noise(n, d), rel=0.08)
    p = np.full(n, 1.0 / n)
    assert rogue.anisotropy_noise(n, d, p) == pytest.approx(rogue.anisotropy_noise(n, d), rel=1e-12)


def test_a_planted_rogue_dimension_carries_the_anisotropy(rng):
    X = rng.normal(size=(2000, 32))
    X[:, 21] += 8.0  # one dimension with a large common offset
    X[:, 4] += 1.0
    summary = rogue.rogue_dimensions(X)
    assert list(summary.top_dims[:2]) == [21, 4]
    assert summary.shares[1] > 0.9
    assert summary.shares[1] <= summary.shares[3] + 1e-12
    assert summary.contributions.sum() == pytest.approx(summary.total)
    ranked = np.sort(summary.contributions)[::-1]
    assert summary.shares[3] == pytest.approx(ranked[:3].sum() / ranked.sum())
    # with fewer than ten positive contributions, only those are named
    assert np.all(summary.contributions[summary.top_dims] > 0)


def test_rogue_shares_are_nan_when_the_total_is_not_positive():
    shares, named = rogue.rogue_shares(np.array([0.2, -0.3, 0.05]))
    assert all(math.isnan(value) for value in shares.values()) and len(named) == 0
    shares, named = rogue.rogue_shares(np.array([0.2, -0.1, 0.05]))
    assert shares[1] == pytest.approx(0.2 / 0.15)  # above 1: the negative dimension pulls the other way
    assert list(named) == [0, 2]


# ----------------------------------------------------------------------------------------------------
# massive activations


def planted_massive(rng, dtype=np.float32):
    X = (0.05 * rng.normal(size=(500, 40))).astype(dtype)  # median |x| about 0.034, so 1000 x median ~ 34
    X[[0, 7, 7, 99, 250], [3, 3, 17, 3, 17]] = [2000, -1500, 300, 120, 101]  # five massive, in rows 0, 7, 99, 250
    X[400, 30] = 99.0  # not above 100
    X[401, 31] = -100.0  # not above 100
    return X


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_planted_massive_activations_are_found_exactly(rng, dtype):
    X = planted_massive(rng, dtype)
    found = rogue.massive_activations(X)
    assert list(found.dims) == [3, 17]
    assert list(found.dim_counts) == [3, 2]
    assert list(np.flatnonzero(found.rows)) == [0, 7, 99, 250]
    assert found.n_occurrences == 4
    assert found.median_abs == pytest.approx(np.median(np.abs(X.astype(np.float64))))
    assert found.threshold > 100


def test_the_relative_threshold_applies(rng):
    X = rng.normal(size=(200, 10))  # median |x| about 0.67: massive needs |x| >= ~670
    X[3, 2], X[4, 5] = 500.0, 900.0
    found = rogue.massive_activations(X)
    assert list(found.dims) == [5] and found.n_occurrences == 1
    assert found.threshold == pytest.approx(1000 * np.median(np.abs(X)))
    assert rogue.massive_activations(X, relative=100.0).n_occurrences == 2
    nothing = rogue.massive_activations(rng.normal(size=(50, 4)))
    assert nothing.n_occurrences == 0 and len(nothing.dims) == 0 and math.isnan(nothing.median_abs)


def test_thresholds_between_float16_numbers_are_exact():
    X = np.zeros((4, 3), dtype=np.float16)
    X[0, 0], X[1, 1], X[2, 2] = 100.25, 100.3125, -100.3125  # float16 neighbours around 100.27
    found = rogue.massive_activations(X, absolute=100.27, relative=0.0)
    assert list(np.flatnonzero(found.rows)) == [1, 2] and list(found.dims) == [1, 2]
    assert found.threshold == 100.3125
    X[3] = 1.0
    X[0, 1:] = X[1, ::2] = X[2, :2] = 1.0  # median |x| 1: the relative threshold 100.27 x 1 decides
    found = rogue.massive_activations(X, absolute=0.0, relative=100.27)
    assert found.median_abs == 1.0 and list(np.flatnonzero(found.rows)) == [1, 2]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape", [(3001, 33), (3000, 32)])
def test_bracketed_median_is_exact(rng, dtype, shape):
    X = rng.standard_t(3, size=shape).astype(dtype)
    expected = np.median(np.abs(X.astype(np.float64)))
    assert rogue.median_abs(X, exact_limit=1000) == expected
    assert rogue.median_abs(X) == expected


def test_massive_carriers_names_the_units_and_the_first_position(rng):
    X = planted_massive(rng)
    rows = rogue.massive_activations(X).rows
    units = np.array(["w"] * len(X), dtype=object)
    units[[0, 7, 99, 250]] = ["The", ",", "The", "the"]
    positions = np.tile(np.arange(10), 50)  # rows 0, 250 at position 0; 7 and 99 at 7 and 9
    carriers = rogue.massive_carriers(rows, units, positions)
    assert carriers.top_units == [("The", 2), (",", 1), ("the", 1)]
    assert carriers.first_position_share == pytest.approx(2 / 4)
    assert carriers.first_position_rate == pytest.approx(2 / 50)


# ----------------------------------------------------------------------------------------------------
# post-processing


def test_standardize_gives_zero_mean_unit_variance_and_keeps_constant_dimensions_finite(rng):
    X = (rng.normal(size=(300, 6)) * [1, 5, 0.1, 3, 1, 1] + [0, 2, -1, 7, 0, 0]).astype(np.float16)
    X[:, 4] = 3.5  # a constant dimension
    Z = postprocess.standardize(X)
    assert np.all(np.isfinite(Z)) and Z.dtype == np.float64
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.delete(Z.std(axis=0), 4), 1.0, atol=1e-12)
    assert not Z[:, 4].any()
    assert postprocess.standardize(X, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize(("d", "components"), [(64, 1), (150, 2), (250, 3), (384, 4), (768, 8), (4096, 41)])
def test_abtt_removes_d_over_100_components(d, components):
    assert postprocess.abtt_components(d) == components


def test_abtt_removes_a_planted_dominant_direction(rng):
    n, d = 1500, 64
    direction = unit(rng.normal(size=(1, d)))[0]
    X = rng.normal(size=(n, d)) + 20.0 * rng.normal(size=(n, 1)) * direction + 5.0
    Y = postprocess.abtt(X)  # D = 1
    np.testing.assert_allclose(Y.mean(axis=0), 0.0, atol=1e-10)
    assert np.abs(Y @ direction).max() < 0.2 * np.abs(X @ direction - (X @ direction).mean()).std()
    pca = PCA(n_components=1).fit(X)
    np.testing.assert_allclose(np.abs(Y @ pca.components_.T), 0.0, atol=1e-9)
    centred = X - X.mean(axis=0)
    explicit = centred - (centred @ pca.components_.T) @ pca.components_
    np.testing.assert_allclose(Y, explicit, atol=1e-9)


def test_principal_components_match_sklearn(rng):
    X = rng.normal(size=(800, 12)) * np.linspace(4, 0.5, 12) @ np.linalg.qr(rng.normal(size=(12, 12)))[0]
    mean, axes = postprocess.principal_components(X.astype(np.float32), 3)
    reference = PCA(n_components=3).fit(X.astype(np.float32).astype(np.float64)).components_
    np.testing.assert_allclose(np.abs(np.sum(axes * reference, axis=1)), 1.0, atol=1e-9)
    np.testing.assert_allclose(mean, X.astype(np.float32).astype(np.float64).mean(axis=0), atol=1e-12)
    Y = postprocess.abtt(X.astype(np.float32), n_components=3)
    np.testing.assert_allclose(Y @ axes.T, 0.0, atol=1e-9)


# ----------------------------------------------------------------------------------------------------
# isotropy


def test_isotropic_gaussian(rng):
    n, d = 4000, 8
    X = rng.normal(size=(n, d)) * 3.0 + 1.0
    assert isotropy.pc1_ratio(X) == pytest.approx(1 / d, abs=0.015)
    assert isotropy.effective_rank(X) == pytest.approx(d, abs=0.05)
    assert isotropy.isoscore(X) == pytest.approx(1.0, abs=0.01)
    assert isotropy.isoscore_star(X) == pytest.approx(1.0, abs=0.005)
    twonn = isotropy.twonn_dimension(X)
    assert twonn.dimension == pytest.approx(d, rel=0.12)
    assert twonn.duplicate_fraction == 0.0 and twonn.n_points == n


def test_rank_k_subspace(rng):
    n, d, k = 3000, 40, 5
    basis = np.linalg.qr(rng.normal(size=(d, k)))[0].T
    X = rng.normal(size=(n, k)) @ basis + rng.normal(size=d)
    assert isotropy.effective_rank(X) == pytest.approx(k, abs=0.05)
    assert isotropy.isoscore(X) == pytest.approx((k - 1) / (d - 1), abs=0.005)
    assert isotropy.pc1_ratio(X) == pytest.approx(1 / k, abs=0.03)
    assert isotropy.twonn_dimension(X).dimension == pytest.approx(k, rel=0.12)
    assert np.count_nonzero(isotropy.covariance_spectrum(X) > 1e-9) == k


def test_one_dimensional_data(rng):
    X = np.outer(rng.normal(size=200), rng.normal(size=30)) + rng.normal(size=30)
    assert isotropy.isoscore(X) == pytest.approx(0.0, abs=1e-12)
    assert isotropy.pc1_ratio(X) == pytest.approx(1.0, abs=1e-12)
    assert isotropy.effective_rank(X) == pytest.approx(1.0, abs=1e-9)
    assert isotropy.isoscore_star(X) == pytest.approx(0.0, abs=0.01)


def test_isoscore_steps_are_the_participation_ratio(rng):
    for variances in (rng.random(17), np.r_[5.0, np.ones(9)], np.r_[np.ones(3), np.zeros(20)]):
        assert isotropy.isoscore_from_variances(variances) == pytest.approx(population_isoscore(variances), abs=1e-12)
    assert math.isnan(isotropy.isoscore_from_variances(np.zeros(5)))
    assert math.isnan(isotropy.isoscore_from_variances(np.ones(1)))


def test_isoscore_star_removes_the_small_sample_bias(rng):
    d = 100
    X = rng.normal(size=(40, d))  # N < d: at most 39 nonzero sample variances
    assert isotropy.isoscore(X) < 0.4
    assert isotropy.isoscore_star(X) > 0.85
    spectrum = 1 / np.sqrt(np.arange(1, d + 1))
    truth = population_isoscore(spectrum)
    errors_plain, errors_star = [], []
    for _ in range(5):
        Y = rng.normal(size=(60, d)) * np.sqrt(spectrum)
        errors_plain.append(isotropy.isoscore(Y) - truth)
        errors_star.append(isotropy.isoscore_star(Y) - truth)
    assert np.mean(errors_plain) < -0.2
    assert abs(np.mean(errors_star)) < 0.1 and abs(np.mean(errors_star)) < abs(np.mean(errors_plain)) / 4
    big = rng.normal(size=(20000, 10)) * np.sqrt(np.arange(1, 11))
    assert isotropy.dispersion_shrinkage(big) < 0.01
    assert isotropy.isoscore_star(big) == pytest.approx(isotropy.isoscore(big), abs=0.005)


def test_isoscore_star_is_scale_invariant_and_takes_an_explicit_target(rng):
    X = rng.normal(size=(50, 30)) * np.linspace(0.2, 2, 30)
    assert isotropy.isoscore_star(1000.0 * X) == pytest.approx(isotropy.isoscore_star(X), abs=1e-12)
    assert isotropy.isoscore_star(X, zeta=0.0, C0=np.eye(30)) == pytest.approx(isotropy.isoscore(X), abs=1e-12)
    assert isotropy.isoscore_star(X, zeta=1.0, C0=np.eye(30)) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        isotropy.isoscore_star(X, C0=np.eye(30))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_isoscore_agrees_with_the_isoscore_package(rng):
    package = pytest.importorskip("IsoScore.IsoScore")
    clouds = [
        rng.normal(size=(500, 20)) * np.linspace(0.1, 3, 20),  # anisotropic
        rng.normal(size=(30, 100)),  # N < d
        np.outer(rng.normal(size=300), rng.normal(size=10)),  # one-dimensional
    ]
    for X in clouds:
        # IsoScore 2.0.1 takes points as (N, d) and computes sqrt(d) in float32: agreement to ~1e-8
        assert float(package.IsoScore(X)) == pytest.approx(isotropy.isoscore(X), abs=1e-7)
    X = clouds[0]
    # the 1.x convention, points as (d, N), gives the transposed cloud's score in 2.0.1
    assert abs(float(package.IsoScore(X.T)) - isotropy.isoscore(X)) > 0.3
    C0 = np.cov(rng.normal(size=(200, 20)) * np.linspace(1, 2, 20), rowvar=False)
    expected = float(package.IsoScore_star(X, C0, 0.3))
    assert isotropy.isoscore_star(X, zeta=0.3, C0=C0) == pytest.approx(expected, abs=1e-7)


def test_twonn_drops_duplicates_first(rng):
    X = rng.normal(size=(1500, 6))
    with_duplicates = np.vstack([X, X[:500]])[rng.permutation(2000)]
    result = isotropy.twonn_dimension(with_duplicates)
    assert result.duplicate_fraction == pytest.approx(500 / 2000)
    assert result.n_points == 1500
    assert result.dimension == pytest.approx(isotropy.twonn_dimension(X).dimension, rel=1e-12)
    assert math.isnan(isotropy.twonn_dimension(np.ones((10, 4))).dimension)


# ----------------------------------------------------------------------------------------------------
# nulls and the panel


def test_nulls(rng):
    X = rng.normal(size=(200, 9)) + np.arange(9)
    null = isotropy.permuted_null(X, np.random.default_rng(3))
    np.testing.assert_array_equal(np.sort(null, axis=0), np.sort(X, axis=0))  # every dimension keeps its values
    moved = np.array([np.argsort(np.argsort(null[:, k])) for k in range(9)])
    assert len({tuple(row) for row in moved}) == 9  # each dimension its own permutation
    np.testing.assert_array_equal(null, isotropy.permuted_null(X, np.random.default_rng(3)))
    gaussian = isotropy.gaussian_null(200, 9, np.random.default_rng(3))
    assert gaussian.shape == (200, 9)
    np.testing.assert_array_equal(gaussian, isotropy.gaussian_null(200, 9, np.random.default_rng(3)))


PANEL_COLUMNS = [
    "rogue_top1_share",
    "rogue_top3_share",
    "rogue_top10_share",
    "rogue_dims",
    "massive_dims",
    "massive_occurrences",
    "pc1_ratio",
    "effective_rank",
    "isoscore",
    "isoscore_star",
    "twonn_dimension",
] + [
    prefix + name
    for prefix in ("null_gaussian_", "null_permuted_")
    for name in ("pc1_ratio", "effective_rank", "isoscore", "isoscore_star", "twonn_dimension", "rogue_top1_share")
]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a
    )


def test_panel_columns_and_determinism(rng):
    X = planted_massive(rng, np.float16)
    X[:, 12] += np.float16(1.0)  # a rogue dimension
    units = np.array(["w"] * len(X), dtype=object)
    units[[0, 7, 99, 250]] = ["The", ",", "The", "the"]
    positions = np.tile(np.arange(10), 50)
    lengths = np.full(50, 10)
    weights = np.repeat(1.0 / (50 * lengths), lengths)
    row = panel.geometry_panel(X, np.random.default_rng(5), 300, weights, units, positions)
    assert set(PANEL_COLUMNS) <= set(row)
    assert row["rogue_dims"].split(",")[0] == "12"
    assert row["massive_dims"] == "3,17" and row["massive_occurrences"] == 4
    assert isinstance(row["massive_occurrences"], int)
    assert row["massive_first_position_share"] == pytest.approx(0.5)
    assert row["massive_top_units"] == '[["The", 2], [",", 1], ["the", 1]]'
    assert row["rogue_anisotropy"] == pytest.approx(rogue.rogue_contributions(X, weights).sum())
    assert math.isnan(row["null_gaussian_rogue_top1_share"])  # nothing to share in an isotropic cloud
    assert row["null_gaussian_isoscore_star"] > 0.9
    again = panel.geometry_panel(X, np.random.default_rng(5), 300, weights, units, positions)
    assert same(row, again)
    other = panel.geometry_panel(X, np.random.default_rng(6), 300, weights, units, positions)
    assert other["isoscore"] != row["isoscore"] and other["rogue_top1_share"] == row["rogue_top1_share"]
    bare = panel.geometry_panel(X, np.random.default_rng(5), 300, twonn_sample_size=100)
    assert bare["massive_top_units"] == "" and math.isnan(bare["massive_first_position_share"])
    assert bare["isoscore"] == row["isoscore"]
