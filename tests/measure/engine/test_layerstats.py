"""The measurement engine (eigen, transforms, layer_pass, word_stats) against the reference definitions.

Every number the engine computes has a known answer: the same measure computed one concern at a time by
``reference``, ``word_pcs``, ``exact_baseline`` and ``rogue`` (float64) on the same vectors, or on the
vectors transformed by ``postprocess.standardize`` / ``postprocess.abtt``. float64 work agrees to rounding
(1e-10); float32 work, on vectors stored in float16 or float32 as the pipeline's are, to 1e-5 (the paper
reports 3 decimals).
"""

from __future__ import annotations

import numpy as np
import pytest

from contextuality.measure.engine import eigen, layer_pass, rogue
from contextuality.measure.engine.transforms import Transform
from contextuality.measure.engine.word_stats import WordStats, word_stats
from contextuality.measure.reference import exact_baseline, postprocess, word_pcs
from contextuality.measure.reference import measures as reference

F64_TOL, F32_TOL = 1e-10, 1e-5


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def word_blocks(rng, sizes, d, *, scale=3.0):
    """Words with a common direction each and anisotropic spread; a degenerate word and a zero row."""
    blocks = []
    for n in sizes:
        base = rng.normal(size=d) * scale + 1.0
        blocks.append(base + rng.normal(size=(n, d)) * rng.uniform(0.1, 1.0, size=d))
    blocks[3] = np.repeat(blocks[3][:1], len(blocks[3]), axis=0)  # identical occurrences: degenerate
    blocks[-1][2] = 0.0  # a zero row: no direction, left out of self-similarity
    return blocks


# sizes covering every route for d = 64: stacked (<= 48), padded Gram (49..64), scatter (> 64)
SIZES = [1, 2, 5, 5, 7, 30, 48, 49, 50, 63, 64, 65, 100, 300, 5]


def reference_stats(X, starts, tol):
    stats = word_pcs.pc_stats_by_word(np.asarray(X, dtype=np.float64), starts, degenerate_tol=tol)
    return reference.self_similarity_exact(X, starts), stats


def assert_close(got: WordStats, ref_self, ref_stats, atol, degenerate=None):
    np.testing.assert_allclose(got.self_similarity, ref_self, rtol=0, atol=atol)
    for column in ("mev", "mev_literal", "mev_centered"):
        want = getattr(ref_stats, column)
        if degenerate is not None:
            want = np.where(degenerate, np.nan, want)
        np.testing.assert_allclose(getattr(got, column), want, rtol=0, atol=atol, err_msg=column)


@pytest.mark.parametrize(
    "work, storage, atol",
    [
        (np.float64, np.float64, F64_TOL),
        (np.float64, np.float16, F64_TOL),
        (np.float32, np.float16, F32_TOL),
        (np.float32, np.float32, F32_TOL),
    ],
)
def test_word_stats_match_the_reference_on_every_route(rng, work, storage, atol):
    X = np.vstack(word_blocks(rng, SIZES, 64)).astype(storage)
    starts = np.cumsum([0] + SIZES[:-1])
    tol = word_pcs.degenerate_tolerance(X)
    got = word_stats(X, np.arange(len(X)), starts, [Transform("none")], degenerate_tol=tol, work_dtype=work)["none"]
    ref_self, ref_stats = reference_stats(X, starts, tol)
    assert_close(got, ref_self, ref_stats, atol)
    np.testing.assert_allclose(got.first_vector, ref_stats.first_vector, rtol=0, atol=atol * 10)
    assert got.degenerate.tolist() == word_pcs.degenerate_words(X, starts, tol).tolist()
    assert got.degenerate[3] and np.isnan(got.mev[3]) and np.isnan(got.self_similarity[0])


def test_occurrence_rows_are_gathered_by_index(rng):
    """Words are read through ``rows``: a shuffled layer with the right row indices gives the same answer."""
    X = np.vstack(word_blocks(rng, SIZES, 64)).astype(np.float16)
    starts = np.cumsum([0] + SIZES[:-1])
    order = rng.permutation(len(X))
    shuffled = np.empty_like(X)
    shuffled[order] = X
    tol = word_pcs.degenerate_tolerance(X)
    none = [Transform("none")]
    a = word_stats(X, np.arange(len(X)), starts, none, degenerate_tol=tol, work_dtype=np.float64)["none"]
    b = word_stats(shuffled, order, starts, none, degenerate_tol=tol, work_dtype=np.float64)["none"]
    np.testing.assert_array_equal(a.mev, b.mev)
    np.testing.assert_allclose(a.self_similarity, b.self_similarity, rtol=0, atol=1e-14)


def near_duplicate_word(rng, n, d, norm=2000.0):
    """A huge common vector with one massive dimension plus a 1e-3-scale spread (the hard case)."""
    common = rng.normal(size=d)
    common[rng.integers(d)] = 60 * np.sqrt(d)
    common *= norm / np.linalg.norm(common)
    return common + 1e-3 * rng.normal(size=(n, d)) * rng.uniform(0.3, 3.0, size=d)


@pytest.mark.parametrize("n", [5, 40, 60, 200])
def test_float32_work_keeps_the_spread_of_near_duplicates(rng, n):
    """float32-stored near-duplicates (spread 5e-7 of the norm): the mean is subtracted in two float32
    parts, so the centred rows are exact to their own rounding and all three MEVs match float64."""
    X = near_duplicate_word(rng, n, 64).astype(np.float32)
    starts = np.array([0])
    tol = word_pcs.degenerate_tolerance(X)
    ref_self, ref_stats = reference_stats(X, starts, tol)
    assert not np.isnan(ref_stats.mev[0])
    got = word_stats(X, np.arange(n), starts, [Transform("none")], degenerate_tol=tol)["none"]
    assert_close(got, ref_self, ref_stats, 1e-4)


@pytest.mark.parametrize("name", ["standardize", "abtt"])
@pytest.mark.parametrize("work, atol", [(np.float64, F64_TOL), (np.float32, F32_TOL)])
def test_variants_are_the_measures_of_the_transformed_vectors(rng, name, work, atol):
    """standardize and abtt: the same numbers as measuring postprocess.standardize(X) / postprocess.abtt(X); the
    degenerate words are those of the stored vectors."""
    X = np.vstack(word_blocks(rng, SIZES, 64)).astype(np.float16)
    X[:, 7] = np.float16(0.5)  # a constant dimension: standardize makes it 0
    starts = np.cumsum([0] + SIZES[:-1])
    offsets = np.array([0, 100, 250, 600, len(X)])
    tol = word_pcs.degenerate_tolerance(X)
    passed = layer_pass.layer_pass(X, offsets, work)
    transform = layer_pass.make_transform(name, passed)
    Y = postprocess.standardize(X) if name == "standardize" else postprocess.abtt(X)
    rows = np.arange(len(X))
    got = word_stats(X, rows, starts, [Transform("none"), transform], degenerate_tol=tol, work_dtype=work)[name]
    ref_self, ref_stats = reference_stats(Y, starts, tol)
    assert_close(got, ref_self, ref_stats, atol, degenerate=word_pcs.degenerate_words(X, starts, tol))
    np.testing.assert_allclose(transform.rows(X, np.float64), Y, rtol=0, atol=1e-4 if work == np.float32 else 1e-9)
    # the exact baselines of the transformed layer
    sums = layer_pass.cosine_pass(X, offsets, [transform], work)[name]
    want = exact_baseline.exact_baseline(Y, offsets)
    got_baseline = layer_pass.exact_baseline_from_pass(passed, sums, transform, tol)
    np.testing.assert_allclose(got_baseline[:6], want[:6], rtol=0, atol=atol)


def test_transform_linear_parts_and_scatter_sandwich(rng):
    X = rng.normal(size=(300, 12)) * rng.uniform(0.5, 3, size=12) + 2.0
    passed = layer_pass.layer_pass(X, np.array([0, 120, 300]), np.float64)
    for name in ("standardize", "abtt"):
        t = layer_pass.make_transform(name, passed)
        C = X - X.mean(axis=0)
        linear = t.linear_rows(C, np.float64)  # the linear part applied to the centred rows
        np.testing.assert_allclose(t.sandwich(C.T @ C), linear.T @ linear, atol=1e-9)
        np.testing.assert_allclose(t.vector(X[:5]), t.rows(X[:5], np.float64), atol=1e-12)
    assert layer_pass.make_transform("none", passed).identity
    with pytest.raises(ValueError, match="unknown post-processing"):
        layer_pass.make_transform("whiten", passed)


@pytest.mark.parametrize("storage", [np.float64, np.float16])
def test_layer_pass_gives_the_exact_baselines_and_rogue_dimensions(rng, storage):
    lengths = rng.integers(0, 9, size=60)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    X = (rng.normal(size=(offsets[-1], 10)) + np.linspace(-1, 2, 10)).astype(storage)
    X[5] = 0  # a zero row: a point of the MEV distribution, no direction for the cosines
    tol = word_pcs.degenerate_tolerance(X)
    for work, atol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        passed = layer_pass.layer_pass(X, offsets, work, block_rows=16)  # several blocks per length class
        got = layer_pass.exact_baseline_from_pass(passed, passed.cosines, Transform("none"), tol)
        want = exact_baseline.exact_baseline(X, offsets)
        np.testing.assert_allclose(got[:6], want[:6], rtol=0, atol=atol)
        assert got[6:] == want[6:]
        weights = np.repeat(1.0 / (np.count_nonzero(lengths) * np.maximum(lengths, 1)), lengths)
        want_rogue = rogue.rogue_dimensions(X, weights)  # float32 within blocks for float16 input (its docstring)
        mine = layer_pass.rogue_summary(passed, X.shape[1])
        rogue_atol = atol if storage == np.float64 else 1e-6
        np.testing.assert_allclose(mine.contributions, want_rogue.contributions, rtol=0, atol=rogue_atol)
        assert mine.total == pytest.approx(got.cosine, abs=atol)
        assert mine.noise == pytest.approx(want_rogue.noise, rel=1e-9)
        assert mine.top_dims.tolist() == want_rogue.top_dims.tolist()
        np.testing.assert_allclose(passed.mean, X.astype(np.float64).mean(axis=0), atol=atol)
        np.testing.assert_allclose(passed.covariance, np.cov(X.astype(np.float64).T, bias=True), atol=atol)


def test_constant_dimensions_are_found_exactly(rng):
    X = rng.normal(size=(50, 6)).astype(np.float16)
    X[:, 2] = np.float16(3.14)
    passed = layer_pass.layer_pass(X, np.array([0, 20, 50]), np.float32)
    assert passed.constant.tolist() == [False, False, True, False, False, False]
    assert np.all(layer_pass.make_transform("standardize", passed).rows(X, np.float64)[:, 2] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_eigenpairs_match_lapack(rng, dtype):
    k, m = 20, 70
    B = rng.normal(size=(k, m, 30)) * rng.uniform(0.2, 2, size=30)
    A = (B @ B.transpose(0, 2, 1)).astype(dtype)
    A[3] = np.outer(np.ones(m), np.ones(m))  # rank one: the Krylov space ends after one step
    A[4] = 0.0  # zero: no direction
    values, vectors = eigen.top_eigenpairs(A)
    want_values, want_vectors = np.linalg.eigh(A.astype(np.float64))
    rel = 1e-6 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(values, want_values[:, -1], rtol=rel, atol=1e-12)
    live = np.arange(k) != 4
    alignment = np.abs(np.einsum("km,km->k", vectors, want_vectors[:, :, -1]))
    np.testing.assert_allclose(alignment[live], 1.0, atol=1e-4 if dtype == np.float32 else 1e-8)


def test_top_eigenpairs_of_padded_matrices_stay_inside_the_mask(rng):
    B = rng.normal(size=(3, 40, 8))
    A = np.zeros((3, 64, 64))
    A[:, :40, :40] = B @ B.transpose(0, 2, 1)
    mask = np.zeros((3, 64), dtype=bool)
    mask[:, :40] = True
    values, vectors = eigen.top_eigenpairs(A, None, mask)
    np.testing.assert_allclose(values, np.linalg.eigvalsh(A)[:, -1], rtol=1e-10)
    assert np.abs(vectors[:, 40:]).max() < 1e-12


def test_word_stats_needs_the_stored_vectors_first(rng):
    X = rng.normal(size=(10, 4))
    passed = layer_pass.layer_pass(X, np.array([0, 10]), np.float64)
    with pytest.raises(ValueError, match="'none'"):
        word_stats(X, np.arange(10), np.array([0]), [layer_pass.make_transform("abtt", passed)], degenerate_tol=1e-20)
