"""W3b's real-sense positive control and the power of its test: two senses of one lemma and token,
balanced subsamples, against monosemous words at the same m; and the smallest detectable share of split words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from contextuality.senses.rows import Rows
from contextuality.senses.separation import split_control
from contextuality.senses.separation.split_control import (
    PER_SENSE,
    SHARE_GRID,
    SplitControl,
    detectable_split_share,
    small_cluster_indices,
    two_sense_sets,
    two_senses_cluster_indices,
)


def usages_of(spec):
    """spec: (lemma, synset, token key, stored) per usage."""
    rows = [{"lemma": lemma, "pos": "n", "synset": synset} for lemma, synset, _, _ in spec]
    keys = np.array([key for _, _, key, _ in spec])
    stored = np.array([0 if ok else -1 for _, _, _, ok in spec])
    return pd.DataFrame(rows), stored, keys


def test_two_sense_sets_take_the_two_largest_senses_of_one_stored_token():
    spec = (
        [("bank", "bank.1", 7, True)] * 5
        + [("bank", "bank.2", 7, True)] * 3
        + [("bank", "bank.3", 7, True)] * 4
        + [("bank", "bank.2", 8, True)] * 3  # another token: not bank.2's usages of token 7
        + [("cell", "cell.1", 9, True)] * 3
        + [("cell", "cell.2", 9, True)] * 2
        + [("cell", "cell.2", 9, False)] * 2  # not stored: cell.2 has only 2 usable usages
    )
    usages, stored, keys = usages_of(spec)
    sets = two_sense_sets(usages, stored, keys)
    assert [key for key, _, _ in sets] == ["bank|n|7"]
    _, a, b = sets[0]
    assert list(a) == [0, 1, 2, 3, 4] and list(b) == [8, 9, 10, 11]  # bank.1 (5), then bank.3 (4)


def clouds(rng, n_sets, d=12, gap=10.0):
    """Two-senses sets whose senses sit ±gap apart, and monosemous words of one Gaussian cloud each."""
    vectors, sets = [], []
    for i in range(n_sets):
        centre = rng.standard_normal(d) * gap
        start = sum(len(v) for v in vectors)
        vectors += [centre + rng.standard_normal((4, d)), -centre + rng.standard_normal((4, d))]
        sets.append((f"w{i}", np.arange(start, start + 4), np.arange(start + 4, start + 8)))
    mono = [rng.standard_normal((30, d)) for _ in range(40)]
    return np.concatenate(vectors), sets, mono


def test_two_well_separated_senses_give_a_strongly_negative_delta():
    """Known answer: two senses far apart split cleanly (CI near 0), a Gaussian word does not (CI ≈ 0.5 at m = 6)."""
    vectors, sets, mono = clouds(np.random.default_rng(0), 30)
    split = two_senses_cluster_indices(vectors, sets, subsamples=5, components=5, seed=1)
    mono_ci = small_cluster_indices(mono, list(range(40)), subsamples=5, components=5)
    assert split.max() < 0.1 and mono_ci.mean() > 0.3
    control = SplitControl(sets, subsamples=5, components=5, seed=1)
    group = pd.Series(["mono"] * 20 + ["poly"] * 20, index=[f"m{i}" for i in range(40)])
    control.measure_reference("centred", dict(zip(group.index, mono)), group, dict(zip(group.index, range(40))))
    rows = Rows("m", 3)
    control.add_rows(rows, "centred", vectors)
    table = rows.frame().set_index("measure")
    delta = table.loc["delta_cluster_index_two_senses"]
    assert delta["value"] < -0.3 and delta["ci_high"] < -0.3 and delta["p"] < 1e-6
    assert delta["n"] == 30 + 20
    # a split this large is seen with a few split words among 20 polysemous ones
    assert table.loc["w3b_detectable_split_share", "value"] <= 0.3


def brute_force_share(poly, mono, split, seed, draws):
    """The same seeded draws, one Mann-Whitney test at a time."""
    rng = np.random.default_rng([seed, 17])
    order = rng.random((draws, poly.size)).argsort(axis=1).argsort(axis=1)
    replacement = split[rng.integers(0, split.size, (draws, poly.size))]
    for share in SHARE_GRID:
        hits = 0
        for d in range(draws):
            mixed = np.where(order[d] < round(share * poly.size), replacement[d], poly)
            p = stats.mannwhitneyu(mixed, mono, alternative="two-sided").pvalue
            hits += p < 0.05 and mixed.mean() < mono.mean()
        if hits >= draws / 2:
            return share
    return np.nan


def test_the_detectable_share_equals_one_test_at_a_time():
    rng = np.random.default_rng(2)
    poly, mono = rng.normal(0.6, 0.05, 40), rng.normal(0.6, 0.05, 45)
    split = rng.normal(0.45, 0.05, 12)
    share = detectable_split_share(poly, mono, split, seed=3, draws=20)
    assert share == brute_force_share(poly, mono, split, 3, 20)
    assert 0.05 < share < 0.6
    # a split no more clusterable than a monosemous word is never detected; a smaller effect needs more split words
    assert np.isnan(detectable_split_share(poly, mono, rng.normal(0.6, 0.05, 12), seed=3, draws=20))
    assert detectable_split_share(poly, mono, split + 0.08, seed=3, draws=20) > share


def test_too_few_words_or_sets_give_nan_rows():
    control = SplitControl([], subsamples=2, components=5, seed=0)
    rows = Rows("m", 0)
    control.add_rows(rows, "centred", np.zeros((4, 3)))
    table = rows.frame().set_index("measure")
    assert np.isnan(table.loc["delta_cluster_index_two_senses", "value"])
    assert np.isnan(table.loc["w3b_detectable_split_share", "value"])
    assert split_control.PER_SENSE == PER_SENSE == 3
    with pytest.raises(ValueError):
        small_cluster_indices([np.zeros((5, 4))], [0], subsamples=2, components=5)  # fewer rows than m
