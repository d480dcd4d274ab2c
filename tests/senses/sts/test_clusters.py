"""Clusterability (C1 cluster index, C2 Gaussian null, C3 matched mono/poly contrast) against known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contextuality.senses.sts.clusters import (
    batched_cluster_index,
    cluster_contrast,
    cluster_index,
    gaussian_null_p,
    matched_mono_poly,
    word_cluster_index,
)


def two_clusters(rng, n=40, d=20, gap=10.0):
    x = rng.standard_normal((n, d))
    x[: n // 2, 0] += gap
    return x


def anisotropic(rng, n=40, d=20):
    spectrum = np.r_[10, 5, 2, np.ones(d - 3)]
    return rng.standard_normal((n, d)) * np.sqrt(spectrum) @ np.linalg.qr(rng.standard_normal((d, d)))[0]


def test_cluster_index_by_hand():
    assert cluster_index(np.array([[-1.0], [-1.0], [1.0], [1.0]]), 0) == 0.0
    # [0, 1, 2, 3]: W1 = 5 about the mean 1.5; the best split {0, 1} | {2, 3} leaves W2 = 4 × 0.25 = 1.
    assert cluster_index(np.array([[0.0], [1.0], [2.0], [3.0]]), 0) == pytest.approx(0.2)
    assert batched_cluster_index(np.array([[[0.0], [1.0], [2.0], [3.0]]]), 0)[0] == pytest.approx(0.2)
    assert np.isnan(cluster_index(np.ones((5, 3)), 0))


def test_batched_lloyd_matches_scikit_learn():
    rng = np.random.default_rng(0)
    ys = rng.standard_normal((60, 20, 5)) * np.array([3, 2, 1.5, 1, 1])
    ys[:20, :10, 0] += 8  # some sets with a clear split
    batched = batched_cluster_index(ys, 1)
    reference = np.array([cluster_index(y, 0) for y in ys])
    np.testing.assert_allclose(batched[:20], reference[:20], atol=1e-12)
    assert np.all(batched <= reference + 0.03) and np.mean(np.abs(batched - reference) < 1e-9) >= 0.85


def test_separated_clusters_are_clusterable():
    rng = np.random.default_rng(1)
    x = two_clusters(rng)
    noise = rng.standard_normal((40, 20))
    assert word_cluster_index(x, seed=3) < 0.5 * word_cluster_index(noise, seed=3)
    assert gaussian_null_p(x, seed=3) <= 0.05


def test_anisotropic_gaussian_is_not_clusterable():
    # 100 draws at α = 0.05: under a valid (or conservative) test at most 10 rejections has probability 0.99
    # (Binomial(100, 0.05): P(X ≥ 11) = 0.011), so the false-positive share is asserted ≤ 0.10.
    rng = np.random.default_rng(2)
    ps = np.array([gaussian_null_p(anisotropic(rng), seed=k) for k in range(100)])
    assert np.mean(ps <= 0.05) <= 0.10


def test_determinism_and_fixed_rows():
    x = anisotropic(np.random.default_rng(4), n=60)
    assert word_cluster_index(x, seed=11) == word_cluster_index(x.copy(), seed=11)
    assert gaussian_null_p(x, seed=11) == gaussian_null_p(x.copy(), seed=11)
    # The subsample depends on the seed only, not on the vectors: a rotated layer gives the same CI.
    q = np.linalg.qr(np.random.default_rng(5).standard_normal((20, 20)))[0]
    assert word_cluster_index(x @ q, seed=11) == pytest.approx(word_cluster_index(x, seed=11), abs=1e-10)
    with pytest.raises(ValueError, match="fewer than"):
        word_cluster_index(x[:10], seed=1)


def test_matched_sets_are_frequency_balanced():
    rng = np.random.default_rng(6)
    n_poly, n_mono = 400, 120
    table = pd.DataFrame(
        {
            "word": [f"w{i}" for i in range(n_poly + n_mono)],
            "n": np.r_[rng.lognormal(4.0, 1.0, n_poly), rng.lognormal(3.3, 0.8, n_mono)].astype(int) + 20,
            "polysemy": ["poly"] * n_poly + ["mono"] * n_mono,
            "n_synsets": np.r_[rng.integers(2, 30, n_poly), np.ones(n_mono, int)],
        }
    )
    m = matched_mono_poly(table, per_group=80, seed=0)
    counts = m.groupby(["bin", "polysemy"]).size().unstack(fill_value=0)
    assert (counts["mono"] == counts["poly"]).all() and counts["mono"].sum() <= 80
    logn = np.log(m["n"]).groupby(m["polysemy"]).mean()
    assert abs(logn["poly"] - logn["mono"]) < 0.15  # unmatched, the gap is ~0.7
    pd.testing.assert_frame_equal(m, matched_mono_poly(table, per_group=80, seed=0))
    with pytest.raises(ValueError, match="polysemy has values"):
        matched_mono_poly(table.assign(polysemy="both"), per_group=5, seed=0)


def test_cluster_contrast():
    rng = np.random.default_rng(7)
    mono = rng.normal(0.7, 0.05, 100)
    poly = np.r_[rng.normal(0.6, 0.05, 100), np.nan]
    r = cluster_contrast(poly, mono)
    assert r["delta_ci"] == pytest.approx(np.nanmean(poly) - mono.mean())
    assert r["ci_low"] < r["delta_ci"] < r["ci_high"] < 0 and r["mw_p"] < 1e-6
    assert (r["n_poly"], r["n_mono"]) == (100, 100)
    same = cluster_contrast(mono[:50], mono[50:])
    assert same["ci_low"] < 0 < same["ci_high"]


# --------------------------------------------------------------------------------------------------
# The positive control (can the statistic see two senses at all?): pseudo-words of two monosemous words, and
# matching on general frequency too


def test_pseudo_words_pair_distinct_words_once_the_same_way_for_a_seed():
    from contextuality.senses.sts.clusters import pseudo_word_pairs

    words = [f"w{i}" for i in range(11)]
    pairs = pseudo_word_pairs(words, seed=3)
    assert len(pairs) == 5 and all(a != b for a, b in pairs)
    assert len({w for pair in pairs for w in pair}) == 10
    assert pairs == pseudo_word_pairs(list(reversed(words)), seed=3)  # the order given does not matter
    assert pairs != pseudo_word_pairs(words, seed=4)


def test_pseudo_words_of_unrelated_one_sense_words_are_detected_as_clusters():
    """Known answer: each one-sense word a Gaussian cloud around its own centre; a pseudo-word joins two
    of them, so it has two clusters: lower CI than its parts (delta < 0, p < 0.01), and its subsamples are half each."""
    from contextuality.senses.sts.clusters import pseudo_word_cluster_index, pseudo_word_pairs, pseudo_word_scores

    rng = np.random.default_rng(5)
    words = {f"w{i}": rng.standard_normal(20) * 1.2 + rng.standard_normal((30, 20)) for i in range(40)}
    mono = [word_cluster_index(x, m=20, subsamples=3, components=5, seed=i) for i, x in enumerate(words.values())]
    pseudo = [
        pseudo_word_cluster_index(words[a], words[b], m=20, subsamples=3, components=5, seed=k)
        for k, (a, b) in enumerate(pseudo_word_pairs(words, seed=0))
    ]
    r = cluster_contrast(pseudo, mono)
    assert r["delta_ci"] < 0 and r["ci_high"] < 0 and r["mw_p"] < 0.01
    a = np.zeros((25, 6))
    b = np.ones((25, 6)) * 10.0
    scores = pseudo_word_scores(a + rng.standard_normal((25, 6)) * 0.01, b, m=9, subsamples=2, components=2, seed=0)
    assert scores.shape == (2, 9, 2)
    # 5 rows near 0 and 4 at 10: the first principal axis splits them 5 | 4
    first = scores[0, :, 0]
    assert len(set(np.sign(first[:5]))) == 1 and len(set(np.sign(first[5:]))) == 1 and first[0] * first[-1] < 0


def test_matching_on_zipf_too_balances_both_frequencies():
    rng = np.random.default_rng(7)
    n = 400
    zipf = rng.uniform(2, 7, n)
    poly = rng.random(n) < 1 / (1 + np.exp(-(zipf - 4.5) * 2))  # polysemous words are the frequent ones
    table = pd.DataFrame(
        {
            "word": [f"w{i}" for i in range(n)],
            "n": rng.integers(20, 500, n),
            "zipf": zipf,
            "polysemy": np.where(poly, "poly", "mono"),
            "n_synsets": np.where(poly, 3, 1),
        }
    )
    plain = matched_mono_poly(table, per_group=100, seed=0)
    both = matched_mono_poly(table, per_group=100, seed=0, by=("n", "zipf"), bins=4)
    gap = {
        name: abs(t.loc[t["polysemy"] == "poly", "zipf"].mean() - t.loc[t["polysemy"] == "mono", "zipf"].mean())
        for name, t in (("plain", plain), ("both", both))
    }
    assert gap["both"] < gap["plain"] / 3 and gap["plain"] > 1
    counts = both.groupby(["bin", "polysemy"]).size().unstack(fill_value=0)
    assert (counts["mono"] == counts["poly"]).all()
    with pytest.raises(ValueError, match="lacks"):
        matched_mono_poly(table.drop(columns="zipf"), per_group=10, seed=0, by=("n", "zipf"))
