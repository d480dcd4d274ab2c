"""The measures against cases with known answers (spec section 4)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA, TruncatedSVD

from contextuality.measure.reference import exact_baseline, word_pcs
from contextuality.measure.reference import measures as reference
from contextuality.paper import MIN_BASELINE_VECTORS

SKLEARN_TOL = 1e-8  # absolute agreement with sklearn / float64 SVD asked of every MEV variant


def brute_force_self_similarity(X: np.ndarray) -> float:
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    cosines = U @ U.T
    n = len(X)
    return float((cosines.sum() - np.trace(cosines)) / (n * n - n))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_unit_rows_normalises_and_keeps_zero_rows(rng):
    X = np.vstack([rng.normal(size=(4, 6)), np.zeros((1, 6))]).astype(np.float16)
    U = reference.unit_rows(X)
    assert U.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(U[:4], axis=1), 1.0, atol=1e-12)
    assert not U[4].any()


@pytest.mark.parametrize("n", [9, 60, 400])
def test_identical_vectors_have_self_similarity_one_and_no_mev(rng, n):
    """n = 9, 60, 400 take the stacked, Gram (48 < n <= d) and scatter (n > d) routes, d = 64."""
    x = rng.normal(size=64) * 40
    X = np.tile(x, (n, 1))
    assert reference.self_similarity_exact(X, np.array([0]))[0] == pytest.approx(1.0, abs=1e-12)
    assert reference.self_similarity_sampled(X, rng, n_pairs=10) == pytest.approx(1.0, abs=1e-12)
    for stats in (word_pcs.word_pc_stats(X), word_pcs.pc_stats_by_word(X, np.array([0]))):
        assert np.isnan([stats.mev, stats.mev_literal, stats.mev_centered]).all()
        # the first vector is still their common direction (Table 1's static vector)
        assert np.ravel(stats.first_vector) @ x / np.linalg.norm(x) == pytest.approx(1.0, abs=1e-12)
    assert word_pcs.degenerate_words(X, np.array([0])).tolist() == [True]


def test_sklearn_gives_no_definite_mev_for_identical_rows(rng):
    """Why degenerate words get NaN: sklearn's ratio is 0/0 up to rounding on identical rows.

    On identical float64 rows (the mean is inexact) it scatters over [0, 1]; on bitwise-identical
    float32 rows passed as lists, as the paper's code passed them, the column variances are exactly 0
    and the paper's ``min(1.0, round(ratio, 3))`` turns the nan/inf into 1.0.
    """
    import warnings

    scattered, paper = set(), set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(12):
            x = rng.normal(size=64) * 30
            X = np.tile(x, (int(rng.integers(5, 30)), 1))
            ratio = TruncatedSVD(n_components=1, algorithm="arpack").fit(X).explained_variance_ratio_[0]
            scattered.add(round(float(min(ratio, 1.0)), 3))
            rows32 = X.astype(np.float32).tolist()
            ratio32 = TruncatedSVD(n_components=1, algorithm="arpack").fit(rows32).explained_variance_ratio_[0]
            assert not np.isfinite(ratio32)
            paper.add(min(1.0, round(ratio32, 3)))
    assert len(scattered) > 3
    assert paper == {1.0}


def test_rank_one_cloud_has_mev_one(rng):
    direction = rng.normal(size=50)
    X = rng.uniform(0.5, 3.0, size=(40, 1)) * direction
    for stats in (word_pcs.word_pc_stats(X), word_pcs.word_pc_stats(X[:20].astype(np.float32))):
        assert stats.mev == pytest.approx(1.0, abs=1e-9)
        assert stats.mev_literal == pytest.approx(1.0, abs=1e-9)
        assert stats.mev_centered == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("sizes", [[2, 3, 5], [1, 8, 40, 2], [100]])
def test_exact_self_similarity_matches_all_pairs(rng, sizes):
    X = rng.normal(size=(sum(sizes), 16)) + 0.3
    starts = np.cumsum([0, *sizes[:-1]])
    got = reference.self_similarity_exact(X, starts)
    for value, start, size in zip(got, starts, sizes):
        if size < 2:
            assert np.isnan(value)
        else:
            assert value == pytest.approx(brute_force_self_similarity(X[start : start + size]), abs=1e-10)


def test_sampled_self_similarity_uses_all_pairs_when_few_and_is_seeded(rng):
    X = rng.normal(size=(10, 8)) + 0.5
    assert reference.self_similarity_sampled(X, rng, n_pairs=1000) == pytest.approx(
        brute_force_self_similarity(X), abs=1e-12
    )
    Y = rng.normal(size=(60, 8)) + 0.5
    first = reference.self_similarity_sampled(Y, np.random.default_rng(1), n_pairs=100)
    assert first == reference.self_similarity_sampled(Y, np.random.default_rng(1), n_pairs=100)
    assert first != reference.self_similarity_sampled(Y, np.random.default_rng(2), n_pairs=100)
    assert abs(first - brute_force_self_similarity(Y)) < 0.1


@pytest.mark.parametrize("shape", [(5, 20), (12, 12), (30, 8), (200, 40), (7, 300), (60, 50), (170, 260), (400, 180)])
def test_mev_truncated_svd_matches_sklearn(rng, shape):
    """Covers the Gram (n <= d) and scatter (n > d) routes, each with LAPACK and with Lanczos (size > 160)."""
    X = rng.normal(size=shape) + rng.normal(size=shape[1])
    expected = TruncatedSVD(n_components=1, algorithm="arpack", tol=0).fit(X).explained_variance_ratio_[0]
    assert reference.mev_truncated_svd(X) == pytest.approx(expected, abs=1e-6)
    singular = np.linalg.svd(X, compute_uv=False)
    assert reference.mev_literal(X) == pytest.approx(singular[0] ** 2 / (singular**2).sum(), abs=1e-10)
    pca = PCA(n_components=1, svd_solver="full").fit(X).explained_variance_ratio_[0]
    assert reference.mev_centered(X) == pytest.approx(pca, abs=1e-9)


def test_batched_pc_stats_match_one_word_at_a_time(rng):
    sizes = [5, 5, 5, 7, 60, 3, 5]
    X = (rng.normal(size=(sum(sizes), 24)) + 1.0).astype(np.float16)
    starts = np.cumsum([0, *sizes[:-1]])
    batched = word_pcs.pc_stats_by_word(X, starts)
    for word, (start, size) in enumerate(zip(starts, sizes)):
        single = word_pcs.word_pc_stats(X[start : start + size])
        for got, expected in zip(batched, single):
            np.testing.assert_allclose(got[word], expected, atol=1e-10)


def test_first_vector_is_the_top_singular_vector_pointing_along_the_mean(rng):
    direction = rng.normal(size=64)
    direction /= np.linalg.norm(direction)
    X = rng.uniform(1.0, 2.0, size=(80, 1)) * direction + 0.05 * rng.normal(size=(80, 64))
    v1 = word_pcs.word_pc_stats(X).first_vector
    assert np.linalg.norm(v1) == pytest.approx(1.0, abs=1e-12)
    assert v1 @ X.mean(axis=0) > 0
    assert v1 @ direction > 0.99
    assert word_pcs.word_pc_stats(-X).first_vector @ -X.mean(axis=0) > 0
    components = TruncatedSVD(n_components=1, algorithm="arpack", tol=0).fit(X).components_[0]
    assert abs(v1 @ components) == pytest.approx(1.0, abs=1e-9)


def test_intra_sentence_similarity(rng):
    same = np.tile(rng.normal(size=12), (4, 1))
    other = rng.normal(size=(3, 12))
    X = np.vstack([same, other])
    offsets = np.array([0, 4, 4, 7])
    values = reference.intra_sentence_similarity(X, offsets, np.array([0, 1, 2]))
    assert values[0] == pytest.approx(1.0, abs=1e-12)
    assert np.isnan(values[1])
    mean = other.mean(axis=0)
    expected = np.mean(other @ mean / (np.linalg.norm(other, axis=1) * np.linalg.norm(mean)))
    assert values[2] == pytest.approx(expected, abs=1e-12)


def test_isotropic_gaussian_baseline_is_near_zero(rng):
    X = rng.normal(size=(3000, 1000)).astype(np.float16)
    offsets = np.arange(0, 3001, 3)
    baseline = reference.anisotropy_baseline(X, offsets, rng.permutation(1000), rng, n_pairs=1000)
    assert baseline.n_vectors == 1000
    assert abs(baseline.cosine) < 0.02
    assert 0 <= baseline.mev < 0.01


def test_baseline_skips_empty_sentences_and_sees_anisotropy(rng):
    X = rng.normal(size=(40, 30)) + 5.0
    offsets = np.array([0, 10, 10, 25, 25, 40])
    baseline = reference.anisotropy_baseline(X, offsets, np.arange(5), rng, n_pairs=200)
    assert baseline.n_vectors == 3
    assert baseline.cosine > 0.9


def test_float16_input_is_computed_in_float64(rng):
    X16 = (rng.normal(size=(30, 40)) + 0.2).astype(np.float16)
    X64 = X16.astype(np.float64)
    assert (
        reference.self_similarity_exact(X16, np.array([0]))[0] == reference.self_similarity_exact(X64, np.array([0]))[0]
    )
    assert reference.mev_truncated_svd(X16) == reference.mev_truncated_svd(X64)
    assert word_pcs.word_pc_stats(X16).first_vector.dtype == np.float64


def test_bootstrap_ci(rng):
    values = rng.normal(loc=0.5, scale=0.1, size=400)
    low, high = reference.bootstrap_ci(np.append(values, np.nan), np.random.default_rng(0), n_resamples=500)
    assert low < values.mean() < high and high - low < 0.05
    assert reference.bootstrap_ci(values, np.random.default_rng(0), 500) == reference.bootstrap_ci(
        values, np.random.default_rng(0), 500
    )
    assert all(np.isnan(reference.bootstrap_ci(np.array([0.3, np.nan]), rng)))
    assert reference.bootstrap_ci(np.full(5, 0.25), rng) == (0.25, 0.25)


def one_ulp_copies(x: np.ndarray, n: int, dtype, rng: np.random.Generator) -> np.ndarray:
    """n copies of x rounded to ``dtype``, each component moved up one unit in the last place at random."""
    rounded = np.tile(x.astype(dtype), (n, 1))
    bumped = np.nextafter(rounded, np.array(np.inf, dtype=dtype))
    return np.where(rng.random(rounded.shape) < 0.5, bumped, rounded)


def sklearn_mevs(X: np.ndarray) -> tuple[float, float, float]:
    """The three MEV variants from sklearn and a float64 SVD: TruncatedSVD, literal, PCA."""
    X = np.asarray(X, dtype=np.float64)
    v1 = TruncatedSVD(n_components=1, algorithm="arpack", tol=0).fit(X).components_[0]
    truncated = np.var(X @ v1) / np.var(X, axis=0).sum()  # sklearn's documented explained_variance_ratio_
    singular = np.linalg.svd(X, compute_uv=False)
    pca = PCA(n_components=1, svd_solver="full").fit(X).explained_variance_ratio_[0]
    return truncated, singular[0] ** 2 / (singular**2).sum(), pca


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_words_identical_up_to_storage_rounding_are_degenerate(rng, dtype):
    """Copies of one vector that differ by one unit in the last place of the storage format."""
    sizes = [6, 6, 30, 70, 6]  # stacked and one-by-one routes (d = 64)
    x = rng.normal(size=(len(sizes), 64)) * np.array([[1.0], [300.0], [20.0], [20.0], [1.0]])
    blocks = [one_ulp_copies(x[w], size, dtype, rng) for w, size in enumerate(sizes)]
    blocks[4] = (x[4] + 0.05 * rng.normal(size=(6, 64))).astype(dtype)  # a real word among them
    X = np.vstack(blocks)
    starts = np.cumsum([0, *sizes[:-1]])
    for data in (X, X.astype(np.float64)):  # the storage format is recognised after conversion too
        assert word_pcs.degenerate_tolerance(data) == max(np.finfo(dtype).eps ** 2, word_pcs.DEGENERATE_FLOOR)
        degenerate = word_pcs.degenerate_words(data, starts)
        assert degenerate.tolist() == [True, True, True, True, False]
        stats = word_pcs.pc_stats_by_word(data, starts)
        for column in stats[:3]:
            assert np.isnan(column).tolist() == degenerate.tolist()
        expected = sklearn_mevs(blocks[4])
        for got, want in zip((stats.mev[4], stats.mev_literal[4], stats.mev_centered[4]), expected):
            assert got == pytest.approx(want, abs=SKLEARN_TOL)
        # the stored relative variance of the degenerate words stays under the eps**2 / 4 bound
        total_var, mean_sq = word_pcs.word_variances(data, starts)
        assert (total_var[:4] <= np.finfo(dtype).eps ** 2 / 4 * mean_sq[:4]).all()


def test_near_identical_but_different_vectors_have_a_real_mev(rng):
    """Vectors 0.3% apart (cosine ~0.99999) are not degenerate, in float16 or float64."""
    x = rng.normal(size=128) * 10
    X = x + 0.003 * np.abs(x) * rng.normal(size=(12, 128))
    for data in (X, X.astype(np.float16)):
        total_var, mean_sq = word_pcs.word_variances(data, np.array([0]))
        assert total_var[0] < 1e-4 * mean_sq[0]
        assert word_pcs.degenerate_words(data, np.array([0])).tolist() == [False]
        stats = word_pcs.word_pc_stats(data)
        for got, want in zip((stats.mev, stats.mev_literal, stats.mev_centered), sklearn_mevs(data)):
            assert got == pytest.approx(want, abs=SKLEARN_TOL)


def test_zero_words_are_degenerate_and_empty_blocks_are_not(rng):
    X = np.vstack([np.zeros((5, 8)), rng.normal(size=(5, 8))])
    assert word_pcs.degenerate_words(X, np.array([0, 5])).tolist() == [True, False]
    assert word_pcs.degenerate_words(X, np.array([0, 5, 5])).tolist() == [True, False, False]
    total_var, _ = word_pcs.word_variances(X, np.array([0, 5, 5]))
    assert np.isnan(total_var[1]) and total_var[2] > 0


def test_storage_epsilon(rng):
    values = rng.normal(size=(50, 40)) * 100
    assert word_pcs.storage_epsilon(values) == np.finfo(np.float64).eps
    assert word_pcs.storage_epsilon(values.astype(np.float32)) == 2.0**-23
    assert word_pcs.storage_epsilon(values.astype(np.float32).astype(np.float64)) == 2.0**-23
    assert word_pcs.storage_epsilon(values.astype(np.float16)) == 2.0**-10
    assert word_pcs.storage_epsilon(values.astype(np.float16).astype(np.float64)) == 2.0**-10
    bfloat16 = (values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    assert word_pcs.storage_epsilon(bfloat16) == 2.0**-7
    big = np.tile(values.astype(np.float16).astype(np.float64), (3, 1))
    big[-1, -1] = 0.1  # one value beyond float16 (and float32) after the first 4,096: a full pass finds it
    assert word_pcs.storage_epsilon(big) == np.finfo(np.float64).eps
    assert word_pcs.degenerate_tolerance(values) == word_pcs.DEGENERATE_FLOOR


def near_duplicate_word(rng, n: int, d: int, norm: float, massive: bool) -> np.ndarray:
    """A large common vector (norm ~100-2000, optionally one huge 'massive activation' dimension) plus
    1e-3-scale anisotropic noise: the case where rank-one corrections of Gram/scatter matrices fail."""
    common = rng.normal(size=d)
    if massive:
        common[rng.integers(d)] = 60 * np.sqrt(d)
    common *= norm / np.linalg.norm(common)
    scales = rng.uniform(0.3, 3.0, size=d)
    scales[rng.integers(d)] = 8.0
    return common + 1e-3 * rng.normal(size=(n, d)) * scales


ROUTES = [(5, 384), (48, 576), (60, 384), (200, 384), (383, 384), (385, 384), (1000, 576), (300, 64)]


@pytest.mark.parametrize("n, d", ROUTES)
@pytest.mark.parametrize("norm, massive", [(100.0, False), (2000.0, True)])
def test_mev_variants_on_near_duplicates_match_sklearn(rng, n, d, norm, massive):
    """All three variants to 1e-8 on both routes (stacked n <= 48; Gram n <= d; scatter n > d; Lanczos > 160)."""
    X = near_duplicate_word(rng, n, d, norm, massive)
    expected = sklearn_mevs(X)
    assert word_pcs.degenerate_words(X, np.array([0])).tolist() == [False]
    for stats in (word_pcs.word_pc_stats(X), word_pcs.pc_stats_by_word(X, np.array([0]))):
        got = np.ravel([stats.mev, stats.mev_literal, stats.mev_centered])
        np.testing.assert_allclose(got, expected, rtol=0, atol=SKLEARN_TOL)


def test_batched_near_duplicates_match_sklearn(rng):
    """Several near-duplicate words of mixed sizes in one call, float16-stored as a real layer is (a
    spread of 0.6% of the norm: above float16's resolution, so not degenerate)."""
    sizes = [5, 7, 5, 12, 80, 5]
    blocks = []
    for size in sizes:
        common = rng.normal(size=96)
        common *= 150.0 / np.linalg.norm(common)
        blocks.append((common + 0.05 * rng.normal(size=(size, 96)) * rng.uniform(0.3, 3.0, size=96)).astype(np.float16))
    X, starts = np.vstack(blocks), np.cumsum([0, *sizes[:-1]])
    stats = word_pcs.pc_stats_by_word(X, starts)
    for word, block in enumerate(blocks):
        got = [stats.mev[word], stats.mev_literal[word], stats.mev_centered[word]]
        np.testing.assert_allclose(got, sklearn_mevs(block), rtol=0, atol=SKLEARN_TOL)


def layer_with_sentences(rng, lengths, d=6, sentence_scale=0.0):
    """Rows of sentences of the given lengths (zero allowed), optionally sharing a per-sentence offset."""
    lengths = np.asarray(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    shared = np.repeat(rng.normal(size=(len(lengths), d)) * sentence_scale, lengths, axis=0)
    return rng.normal(size=(offsets[-1], d)) + 0.6 + shared, offsets


def brute_force_baselines(X, offsets):
    """The three exact cosines by explicit double sums over all pairs, with the paper's weights."""
    lengths = np.diff(offsets)
    S = np.count_nonzero(lengths)
    sentence = np.repeat(np.arange(len(lengths)), lengths)
    p = 1.0 / (S * lengths[sentence])
    norms = np.linalg.norm(X, axis=1)
    sums = dict.fromkeys(["w", "wd", "b", "bd", "u", "ud"], 0.0)
    for i in range(len(X)):
        for j in range(len(X)):
            if i == j or norms[i] == 0 or norms[j] == 0:
                continue
            cosine = X[i] @ X[j] / (norms[i] * norms[j])
            sums["w"] += p[i] * p[j] * cosine
            sums["wd"] += p[i] * p[j]
            sums["u"] += cosine
            sums["ud"] += 1
            if sentence[i] != sentence[j]:
                sums["b"] += p[i] * p[j] * cosine
                sums["bd"] += p[i] * p[j]
    return sums["w"] / sums["wd"], sums["b"] / sums["bd"], sums["u"] / sums["ud"]


def test_exact_baseline_matches_all_pairs(rng):
    X, offsets = layer_with_sentences(rng, [3, 0, 1, 4, 2, 0, 5, 1, 2], sentence_scale=0.8)
    X[4] = 0.0  # a zero row inside a sentence
    X[offsets[7]] = 0.0  # a sentence whose only row is zero: it can be drawn, its cosines are left out
    expected = brute_force_baselines(X, offsets)
    for chunk_elements in (word_pcs.BATCH_ELEMENTS, 6, 20):  # whole layer, one sentence per chunk, a few
        for data in (X, X.astype(np.float16)):
            got = exact_baseline.exact_baseline(data, offsets, chunk_elements=chunk_elements)
            want = expected if data.dtype == np.float64 else brute_force_baselines(data.astype(np.float64), offsets)
            np.testing.assert_allclose([got.cosine, got.cosine_between, got.cosine_uniform], want, rtol=0, atol=1e-12)
            assert (got.n_vectors, got.n_sentences) == (len(X) - 2, 7)
    assert abs(expected[0] - expected[1]) > 0.01  # same-sentence pairs matter here


def test_exact_baseline_mev_is_the_mev_of_weight_replicated_rows(rng):
    """With integer weights the population MEV is sklearn's MEV of rows repeated in proportion to p_i."""
    lengths = np.array([1, 2, 3, 4, 6, 0, 12])
    X, offsets = layer_with_sentences(rng, lengths, d=10)
    X *= rng.uniform(0.5, 4.0, size=10)  # unequal column scales: a definite first component
    X[offsets[3]] = 0.0  # a zero row is a point of the distribution (TruncatedSVD includes it)
    repeats = np.repeat(np.where(lengths > 0, 12 // np.maximum(lengths, 1), 0), lengths)
    replicated = np.repeat(X, repeats, axis=0)
    got = exact_baseline.exact_baseline(X, offsets, chunk_elements=30)
    expected = sklearn_mevs(replicated)
    np.testing.assert_allclose([got.mev, got.mev_literal, got.mev_centered], expected, rtol=0, atol=1e-10)
    cosines = exact_baseline.exact_baseline(X, offsets, with_mev=False, chunk_elements=30)
    assert np.isnan([cosines.mev, cosines.mev_literal, cosines.mev_centered]).all()
    assert cosines.cosine == got.cosine


def test_exact_baseline_mev_keeps_precision_on_near_duplicates(rng):
    X = near_duplicate_word(rng, 400, 64, 2000.0, True)
    offsets = np.arange(0, 401, 4)  # equal lengths: equal weights
    got = exact_baseline.exact_baseline(X, offsets, chunk_elements=64 * 50)
    np.testing.assert_allclose([got.mev, got.mev_literal, got.mev_centered], sklearn_mevs(X), rtol=0, atol=SKLEARN_TOL)


def test_sampled_baseline_averages_to_the_exact_between_sentence_value(rng):
    """The paper's estimator (anisotropy_baseline, every sentence sampled, m = S vectors) has expected
    value 1/m + (1 - 1/m) * cosine_between: a vector paired with itself gives 1, two distinct draws
    come from different sentences."""
    lengths = rng.integers(1, 6, size=25)
    X, offsets = layer_with_sentences(rng, lengths, d=8, sentence_scale=1.0)
    exact = exact_baseline.exact_baseline(X, offsets)
    m = len(lengths)
    expected = 1 / m + (1 - 1 / m) * exact.cosine_between
    draws = np.array([
        reference.anisotropy_baseline(X, offsets, np.arange(m), np.random.default_rng(seed), n_pairs=400).cosine
        for seed in range(1500)
    ])  # fmt: skip
    standard_error = draws.std() / np.sqrt(len(draws))
    assert abs(draws.mean() - expected) < 4 * standard_error
    assert abs(draws.mean() - (1 / m + (1 - 1 / m) * exact.cosine)) > 4 * standard_error


def test_exact_baseline_without_rows():
    empty = exact_baseline.exact_baseline(np.zeros((0, 4)), np.array([0, 0, 0]))
    assert empty.n_sentences == 0 and np.isnan(empty.cosine) and np.isnan(empty.mev)
    one = exact_baseline.exact_baseline(np.ones((1, 4)), np.array([0, 1]))
    assert one.n_vectors == 1 and np.isnan([one.cosine, one.cosine_between, one.cosine_uniform]).all()
    with pytest.raises(ValueError, match="sentence_offsets"):
        exact_baseline.exact_baseline(np.ones((3, 4)), np.array([0, 2]))


def test_a_sampled_baseline_from_fewer_than_100_vectors_is_reported_as_na(rng):
    """With one sentence every sampled pair is one vector: cosine 1.000, a baseline that says nothing. The paper's
    estimator stays as defined; a layer reports it only from MIN_BASELINE_VECTORS vectors or more, as NaN below."""
    X = rng.normal(size=(12, 16))
    one = reference.anisotropy_baseline(X, np.array([0, 12]), np.array([0]), rng, n_pairs=1000)
    assert one.n_vectors == 1 and one.cosine == pytest.approx(1.0)
    assert MIN_BASELINE_VECTORS == 100
    shown = reference.reported(one)
    assert np.isnan(shown.cosine) and np.isnan(shown.mev) and shown.n_vectors == 1
    offsets = np.arange(0, 301, 3)
    enough = reference.anisotropy_baseline(rng.normal(size=(300, 16)), offsets, np.arange(100), rng, n_pairs=1000)
    assert enough.n_vectors == 100 and reference.reported(enough) == enough
