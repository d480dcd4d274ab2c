"""Sense separation (A1 Δ̄, A2 AUROC, A3 1-NN, C5 ARI) and the vector preprocessing, against known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contextuality.senses.separation.design import SeparationDesign
from contextuality.senses.vectors import layer_moments, preprocess, unit_rows


def make_usages(n_words=30, size=(4, 9), senses=(2, 4), seed=0, repeat=1):
    """Usages of n_words lemmas (some with two forms unless ``repeat`` > 1, which gives each drawn sense
    ``repeat`` usages) and all same-form pairs, as the job builds them."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(n_words):
        k = int(rng.integers(senses[0], senses[1] + 1))
        for s in np.repeat(rng.integers(0, k, int(rng.integers(size[0], size[1] + 1))), repeat):
            form = f"w{w}" if w % 5 or repeat > 1 else f"w{w}{'s' * int(rng.integers(0, 2))}"
            rows.append(
                {
                    "lemma": f"w{w}",
                    "pos": "n",
                    "synset": f"w{w}.n.{s}",
                    "lexname": f"noun.{s % 2}",
                    "form_lower": form,
                    "position": 1,
                }
            )
    usages = pd.DataFrame(rows).reset_index(names="usage_id")
    a, b = [], []
    for _, g in usages.groupby(["lemma", "pos", "form_lower"]):
        ids = g["usage_id"].to_numpy()
        i, j = np.triu_indices(ids.size, 1)
        a.append(ids[i]), b.append(ids[j])
    a, b = np.concatenate(a), np.concatenate(b)
    syn, lex = usages["synset"].to_numpy(), usages["lexname"].to_numpy()
    pairs = pd.DataFrame({"usage_a": a, "usage_b": b, "same_sense": syn[a] == syn[b], "same_lexname": lex[a] == lex[b]})
    return usages, pairs


def word_key(usages):
    return list(zip(usages["lemma"], usages["pos"], usages["form_lower"]))


def brute_force(usages, pairs, x):
    """Δ̄ and pooled AUROC by plain loops, and 1-NN accuracy by argmax (first maximum = smallest usage_id)."""
    valid = ~np.isnan(x).any(1)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    by_word = {}
    for a, b, same in zip(pairs["usage_a"], pairs["usage_b"], pairs["same_sense"]):
        if valid[a] and valid[b]:
            by_word.setdefault(word_key(usages)[a], []).append((float(u[a] @ u[b]), bool(same)))
    deltas, same_c, diff_c = [], [], []
    for items in by_word.values():
        s = [c for c, t in items if t]
        d = [c for c, t in items if not t]
        same_c += s
        diff_c += d
        if s and d:
            deltas.append(np.mean(s) - np.mean(d))
    auc = np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p in same_c for q in diff_c])
    keys, senses = word_key(usages), usages["synset"].to_numpy()
    hits = []
    for i in np.flatnonzero(valid):
        others = [j for j in range(len(usages)) if j != i and valid[j] and keys[j] == keys[i]]
        if others:
            sims = np.array([u[i] @ u[j] for j in others])
            hits.append(senses[others[int(np.argmax(np.round(sims, 12)))]] == senses[i])
    return float(np.mean(deltas)), float(auc), float(np.mean(hits))


def test_identical_vectors_give_chance_exactly():
    usages, pairs = make_usages(seed=1)
    design = SeparationDesign(usages, pairs, permutations=200, seed=0)
    rng = np.random.default_rng(2)
    word = pd.factorize(pd.Series(word_key(usages)))[0]
    x = rng.standard_normal((word.max() + 1, 16))[word]  # one vector per word: layer 0 of a rotary decoder
    r = design.measure(x)
    assert r["auroc"] == 0.5 and r["auroc_coarse"] == 0.5
    assert r["delta"] == 0.0 and r["delta_null_sd"] == 0.0
    # Tie rule: the neighbour is the word's other usage with the smallest usage_id.
    keys, senses = word_key(usages), usages["synset"].to_numpy()
    expected = [
        senses[min(j for j in range(len(keys)) if j != i and keys[j] == keys[i])] == senses[i]
        for i in range(len(keys))
        if keys.count(keys[i]) > 1
    ]
    assert r["knn_accuracy"] == pytest.approx(np.mean(expected), abs=1e-15)


def test_senses_as_separated_clusters_are_found():
    usages, pairs = make_usages(size=(2, 5), seed=3, repeat=2)  # every sense twice: 1-NN can be right
    design = SeparationDesign(usages, pairs, permutations=300, seed=0)
    rng = np.random.default_rng(4)
    sense = pd.factorize(usages["synset"])[0]
    x = rng.standard_normal((sense.max() + 1, 32))[sense] * 10 + rng.standard_normal((len(usages), 32)) * 0.1
    r = design.measure(x, ari=True)
    assert r["auroc"] == 1.0 and r["auroc_coarse"] == 1.0
    assert r["delta"] > 0.5 and r["delta_p"] == 1 / 301 and r["delta_z"] > 10
    assert r["knn_accuracy"] == 1.0 and r["knn_accuracy"] > r["knn_majority"]
    assert r["ari"] == pytest.approx(1.0) and r["n_words_ari"] > 0
    assert r["delta_ci_low"] <= r["delta"] <= r["delta_ci_high"] and r["auroc_ci_low"] == 1.0


def test_labels_unrelated_to_the_vectors_give_a_uniform_null():
    usages, pairs = make_usages(n_words=40, seed=5)
    design = SeparationDesign(usages, pairs, permutations=200, seed=0)
    rng = np.random.default_rng(6)
    word = pd.factorize(pd.Series(word_key(usages)))[0]
    ps, nulls = [], []
    for _ in range(40):
        fake = rng.integers(0, 3, len(usages)) + 3 * word  # clusters from a labelling unrelated to the senses
        x = rng.standard_normal((fake.max() + 1, 16))[fake] * 3 + rng.standard_normal((len(usages), 16))
        r = design.measure(x)
        ps.append(r["delta_p"]), nulls.append(r["delta_null_mean"] / r["delta_null_sd"])
    assert abs(np.mean(nulls)) < 0.3  # the null mean is ~0 in units of its sd
    assert 0.3 < np.mean(ps) < 0.7 and 0.0 < np.mean(np.array(ps) <= 0.1) < 0.3


def test_against_brute_force_with_missing_rows():
    usages, pairs = make_usages(n_words=12, seed=7)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((len(usages), 8))
    x[[0, 5, 17]] = np.nan
    r = SeparationDesign(usages, pairs, permutations=50, seed=0).measure(x)
    delta, auc, knn = brute_force(usages, pairs, x)
    assert r["delta"] == pytest.approx(delta, abs=1e-12)
    assert r["auroc"] == pytest.approx(auc, abs=1e-12)
    assert r["knn_accuracy"] == pytest.approx(knn, abs=1e-15)
    assert r["n_excluded_nan"] == 3 and r["n_knn"] == len(usages) - 3
    assert r["delta_ci_low"] < delta < r["delta_ci_high"] and r["auroc_ci_low"] < auc < r["auroc_ci_high"]


def test_majority_and_chance_baselines_by_hand():
    usages, pairs = make_usages(n_words=15, seed=9)
    r = SeparationDesign(usages, pairs, permutations=10, seed=0).measure(
        np.random.default_rng(1).standard_normal((len(usages), 4))
    )
    keys, senses = word_key(usages), usages["synset"].to_numpy()
    maj, chance = [], []
    for i in range(len(keys)):
        others = [j for j in range(len(keys)) if j != i and keys[j] == keys[i]]
        group = others + [i]
        counts = {s: sum(senses[j] == s for j in others) for s in senses[others]}
        first = {s: min(j for j in group if senses[j] == s) for s in counts}
        pred = min(counts, key=lambda s: (-counts[s], first[s]))
        maj.append(pred == senses[i])
        n = len(group)
        chance.append(sum(c * (c - 1) for c in pd.Series(senses[group]).value_counts()) / (n * (n - 1)))
    assert r["knn_majority"] == pytest.approx(np.mean(maj), abs=1e-15)
    assert r["knn_chance"] == pytest.approx(np.mean(chance), abs=1e-15)


def test_bad_input_is_refused():
    usages, pairs = make_usages(n_words=3, seed=0)
    with pytest.raises(ValueError, match="lacks columns"):
        SeparationDesign(usages.drop(columns="synset"), pairs)
    bad = pairs.copy()
    bad["same_sense"] = ~bad["same_sense"]
    with pytest.raises(ValueError, match="same_sense disagrees"):
        SeparationDesign(usages, bad)
    with pytest.raises(ValueError, match="one row per usage"):
        SeparationDesign(usages, pairs, permutations=5).measure(np.zeros((2, 3)))


def test_preprocessing_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 6)) * 3 + 100
    x[:, 2] = 7.0  # a constant dimension: std 0
    mean, std = layer_moments(x[i : i + 7] for i in range(0, 50, 7))
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-13)
    np.testing.assert_allclose(std, x.std(0), atol=1e-12)
    np.testing.assert_array_equal(preprocess(x, mean, std, "raw"), x)
    np.testing.assert_allclose(preprocess(x, mean, std, "centred"), x - x.mean(0), atol=1e-12)
    z = preprocess(x, mean, std, "standardised")
    keep = [0, 1, 3, 4, 5]
    np.testing.assert_allclose(z[:, keep], (x[:, keep] - x[:, keep].mean(0)) / x[:, keep].std(0), atol=1e-10)
    assert np.all(z[:, 2] == 0)
    u = unit_rows(np.vstack([x[:3], np.zeros(6)]))
    np.testing.assert_allclose(np.linalg.norm(u[:3], axis=1), 1.0)
    assert np.all(u[3] == 0)
    with pytest.raises(ValueError, match="kind"):
        preprocess(x, mean, std, "abtt")


def test_no_word_with_both_kinds_of_pair_gives_nan():
    usages, pairs = make_usages(n_words=4, senses=(1, 1), seed=0)  # one sense per word: no different pairs
    x = np.random.default_rng(0).normal(size=(len(usages), 3))
    r = SeparationDesign(usages, pairs, permutations=20, seed=0).measure(x)
    assert np.isnan(r["delta"]) and np.isnan(r["delta_p"]) and r["n_words_delta"] == 0 and np.isnan(r["auroc"])
