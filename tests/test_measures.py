"""The measures against cases with known answers (spec section 4)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA, TruncatedSVD

from contextuality import measures


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
    U = measures.unit_rows(X)
    assert U.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(U[:4], axis=1), 1.0, atol=1e-12)
    assert not U[4].any()


def test_identical_vectors_have_self_similarity_and_mev_one(rng):
    X = np.tile(rng.normal(size=32), (9, 1))
    assert measures.self_similarity_exact(X, np.array([0]))[0] == pytest.approx(1.0, abs=1e-12)
    assert measures.self_similarity_sampled(X, rng, n_pairs=10) == pytest.approx(1.0, abs=1e-12)
    stats = measures.word_pc_stats(X)
    assert stats.mev == 1.0 and stats.mev_centered == 1.0
    assert stats.mev_literal == pytest.approx(1.0, abs=1e-12)


def test_rank_one_cloud_has_mev_one(rng):
    direction = rng.normal(size=50)
    X = rng.uniform(0.5, 3.0, size=(40, 1)) * direction
    for stats in (measures.word_pc_stats(X), measures.word_pc_stats(X[:20].astype(np.float32))):
        assert stats.mev == pytest.approx(1.0, abs=1e-9)
        assert stats.mev_literal == pytest.approx(1.0, abs=1e-9)
        assert stats.mev_centered == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("sizes", [[2, 3, 5], [1, 8, 40, 2], [100]])
def test_exact_self_similarity_matches_all_pairs(rng, sizes):
    X = rng.normal(size=(sum(sizes), 16)) + 0.3
    starts = np.cumsum([0, *sizes[:-1]])
    got = measures.self_similarity_exact(X, starts)
    for value, start, size in zip(got, starts, sizes):
        if size < 2:
            assert np.isnan(value)
        else:
            assert value == pytest.approx(brute_force_self_similarity(X[start : start + size]), abs=1e-10)


def test_sampled_self_similarity_uses_all_pairs_when_few_and_is_seeded(rng):
    X = rng.normal(size=(10, 8)) + 0.5
    assert measures.self_similarity_sampled(X, rng, n_pairs=1000) == pytest.approx(brute_force_self_similarity(X), abs=1e-12)
    Y = rng.normal(size=(60, 8)) + 0.5
    first = measures.self_similarity_sampled(Y, np.random.default_rng(1), n_pairs=100)
    assert first == measures.self_similarity_sampled(Y, np.random.default_rng(1), n_pairs=100)
    assert first != measures.self_similarity_sampled(Y, np.random.default_rng(2), n_pairs=100)
    assert abs(first - brute_force_self_similarity(Y)) < 0.1


@pytest.mark.parametrize("shape", [(5, 20), (12, 12), (30, 8), (200, 40), (7, 300), (60, 50), (170, 260), (400, 180)])
def test_mev_truncated_svd_matches_sklearn(rng, shape):
    """Covers the Gram (n <= d) and scatter (n > d) routes, each with LAPACK and with Lanczos (size > 160)."""
    X = rng.normal(size=shape) + rng.normal(size=shape[1])
    expected = TruncatedSVD(n_components=1, algorithm="arpack", tol=0).fit(X).explained_variance_ratio_[0]
    assert measures.mev_truncated_svd(X) == pytest.approx(expected, abs=1e-6)
    singular = np.linalg.svd(X, compute_uv=False)
    assert measures.mev_literal(X) == pytest.approx(singular[0] ** 2 / (singular**2).sum(), abs=1e-10)
    pca = PCA(n_components=1, svd_solver="full").fit(X).explained_variance_ratio_[0]
    assert measures.mev_centered(X) == pytest.approx(pca, abs=1e-9)


def test_batched_pc_stats_match_one_word_at_a_time(rng):
    sizes = [5, 5, 5, 7, 60, 3, 5]
    X = (rng.normal(size=(sum(sizes), 24)) + 1.0).astype(np.float16)
    starts = np.cumsum([0, *sizes[:-1]])
    batched = measures.pc_stats_by_word(X, starts)
    for word, (start, size) in enumerate(zip(starts, sizes)):
        single = measures.word_pc_stats(X[start : start + size])
        for got, expected in zip(batched, single):
            np.testing.assert_allclose(got[word], expected, atol=1e-10)


def test_first_singular_vector_recovers_direction(rng):
    direction = rng.normal(size=64)
    direction /= np.linalg.norm(direction)
    X = rng.uniform(1.0, 2.0, size=(80, 1)) * direction + 0.05 * rng.normal(size=(80, 64))
    v1 = measures.first_singular_vector(X)
    assert np.linalg.norm(v1) == pytest.approx(1.0, abs=1e-12)
    assert v1 @ X.mean(axis=0) > 0
    assert v1 @ direction > 0.99
    assert measures.first_singular_vector(-X) @ -X.mean(axis=0) > 0
    components = TruncatedSVD(n_components=1, algorithm="arpack", tol=0).fit(X).components_[0]
    assert abs(v1 @ components) == pytest.approx(1.0, abs=1e-9)


def test_intra_sentence_similarity(rng):
    same = np.tile(rng.normal(size=12), (4, 1))
    other = rng.normal(size=(3, 12))
    X = np.vstack([same, other])
    offsets = np.array([0, 4, 4, 7])
    values = measures.intra_sentence_similarity(X, offsets, np.array([0, 1, 2]))
    assert values[0] == pytest.approx(1.0, abs=1e-12)
    assert np.isnan(values[1])
    mean = other.mean(axis=0)
    expected = np.mean(other @ mean / (np.linalg.norm(other, axis=1) * np.linalg.norm(mean)))
    assert values[2] == pytest.approx(expected, abs=1e-12)


def test_isotropic_gaussian_baseline_is_near_zero(rng):
    X = rng.normal(size=(3000, 1000)).astype(np.float16)
    offsets = np.arange(0, 3001, 3)
    baseline = measures.anisotropy_baseline(X, offsets, rng.permutation(1000), rng, n_pairs=1000)
    assert baseline.n_vectors == 1000
    assert abs(baseline.cosine) < 0.02
    assert 0 <= baseline.mev < 0.01


def test_baseline_skips_empty_sentences_and_sees_anisotropy(rng):
    X = rng.normal(size=(40, 30)) + 5.0
    offsets = np.array([0, 10, 10, 25, 25, 40])
    baseline = measures.anisotropy_baseline(X, offsets, np.arange(5), rng, n_pairs=200)
    assert baseline.n_vectors == 3
    assert baseline.cosine > 0.9


def test_float16_input_is_computed_in_float64(rng):
    X16 = (rng.normal(size=(30, 40)) + 0.2).astype(np.float16)
    X64 = X16.astype(np.float64)
    assert measures.self_similarity_exact(X16, np.array([0]))[0] == measures.self_similarity_exact(X64, np.array([0]))[0]
    assert measures.mev_truncated_svd(X16) == measures.mev_truncated_svd(X64)
    assert measures.first_singular_vector(X16).dtype == np.float64


def test_bootstrap_ci(rng):
    values = rng.normal(loc=0.5, scale=0.1, size=400)
    low, high = measures.bootstrap_ci(np.append(values, np.nan), np.random.default_rng(0), n_resamples=500)
    assert low < values.mean() < high and high - low < 0.05
    assert measures.bootstrap_ci(values, np.random.default_rng(0), 500) == measures.bootstrap_ci(values, np.random.default_rng(0), 500)
    assert all(np.isnan(measures.bootstrap_ci(np.array([0.3, np.nan]), rng)))
    assert measures.bootstrap_ci(np.full(5, 0.25), rng) == (0.25, 0.25)
