"""W3a at its real size: the held-out threshold's balanced accuracy, the shape baselines, the cosine AUROC
within strata of the length difference, the same-token control, the per-lemma AUROC, the paired bootstrap against
layer 0 and the 1-NN ceiling, each against a known answer, a brute-force count or scikit-learn's own result."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.model_selection import GroupKFold
from test_separation import make_usages, word_key

from contextuality.senses.separation.design import LENGTH_STRATA_CAP, SeparationDesign


def shaped(n_words=60, seed=0, repeat=2, sense_sets_length=False):
    """Usages with a sentence length each: independent of the sense, or (``sense_sets_length``) set by it."""
    usages, pairs = make_usages(n_words=n_words, size=(3, 6), seed=seed, repeat=repeat)
    rng = np.random.default_rng(seed + 100)
    sense = pd.factorize(usages["synset"])[0]
    if sense_sets_length:
        lengths = 4 + 2 * (sense % 4) + rng.integers(0, 3, len(usages))  # strata hold both kinds of pair
    else:
        lengths = rng.integers(3, 15, len(usages))
    usages["position"] = rng.integers(0, lengths)  # the target somewhere in its sentence
    return usages, pairs, lengths


def test_a_shape_only_predictor_gives_chance_where_sense_is_independent_of_shape():
    """Known answer: sense independent of shape -> the held-out shape AUROC is 0.5 within its interval."""
    usages, pairs, lengths = shaped(n_words=120, seed=1)
    design = SeparationDesign(usages, pairs, permutations=19, bootstrap=400, seed=0, lengths=lengths)
    x = np.random.default_rng(2).standard_normal((len(usages), 8))
    r = design.measure(x)
    assert r["auroc_shape_ci_low"] < 0.5 < r["auroc_shape_ci_high"]
    assert abs(r["auroc_shape"] - 0.5) < 0.06


def test_a_shape_only_predictor_sees_a_sense_that_sets_the_length():
    usages, pairs, lengths = shaped(n_words=80, seed=3, sense_sets_length=True)
    design = SeparationDesign(usages, pairs, permutations=19, bootstrap=200, seed=0, lengths=lengths)
    r = design.measure(np.random.default_rng(4).standard_normal((len(usages), 8)))
    assert r["auroc_shape_ci_low"] > 0.7
    # random vectors: the cosine adds nothing, and within strata of |ΔL| it is chance
    assert r["auroc_ci_low"] < 0.5 < r["auroc_ci_high"]
    assert r["auroc_stratified_ci_low"] < 0.5 < r["auroc_stratified_ci_high"]


def brute_force_stratified(usages, pairs, x, lengths):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    num = den = 0.0
    strata = {}
    for a, b, same in zip(pairs["usage_a"], pairs["usage_b"], pairs["same_sense"]):
        stratum = min(abs(int(lengths[a]) - int(lengths[b])), LENGTH_STRATA_CAP)
        strata.setdefault(stratum, ([], []))[0 if same else 1].append(float(u[a] @ u[b]))
    for same, diff in strata.values():
        for p in same:
            for q in diff:
                num += 1.0 if p > q else 0.5 if p == q else 0.0
        den += len(same) * len(diff)
    return num / den


def test_the_stratified_auroc_is_the_brute_force_count_within_strata():
    usages, pairs, lengths = shaped(n_words=25, seed=5)
    x = np.random.default_rng(6).standard_normal((len(usages), 6))
    r = SeparationDesign(usages, pairs, permutations=19, seed=0, lengths=lengths).measure(x)
    assert r["auroc_stratified"] == pytest.approx(brute_force_stratified(usages, pairs, x, lengths), abs=1e-12)
    assert r["auroc_stratified_ci_low"] < r["auroc_stratified"] < r["auroc_stratified_ci_high"]


def test_pairs_of_the_same_stored_token_give_exactly_chance_at_a_rotary_decoders_layer_0():
    """Known answer: identical stored tokens -> identical layer-0 vectors -> AUROC 0.5 exactly, while
    same-form pairs that differ by a capital letter (another token) move the pooled AUROC off 0.5."""
    usages, pairs = make_usages(n_words=40, size=(4, 8), seed=7)
    sense = pd.factorize(usages["synset"])[0]
    # the first sense of every word is written with a capital letter: another stored token
    capital = sense % 3 == 0
    token = pd.factorize(pd.Series([f"{'C' if c else 'c'}{w}" for c, w in zip(capital, word_key(usages))]))[0]
    x = np.random.default_rng(8).standard_normal((token.max() + 1, 16))[token]  # layer 0: one row per token
    r = SeparationDesign(usages, pairs, permutations=19, seed=0, token_keys=token).measure(x)
    assert r["auroc_same_token"] == 0.5
    assert r["auroc"] != 0.5 and r["n_pairs_token_differs"] > 0
    assert r["n_pairs_same_token"] + r["n_pairs_token_differs"] == len(pairs)


def test_the_macro_auroc_is_the_mean_of_scikit_learns_per_lemma_auroc():
    usages, pairs = make_usages(n_words=30, seed=9)
    x = np.random.default_rng(10).standard_normal((len(usages), 5))
    r = SeparationDesign(usages, pairs, permutations=19, seed=0).measure(x)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = np.einsum("ij,ij->i", u[pairs["usage_a"]], u[pairs["usage_b"]])
    lemma = usages["lemma"].to_numpy()[pairs["usage_a"]]
    aucs = [
        roc_auc_score(pairs["same_sense"][lemma == w], cos[lemma == w])
        for w in np.unique(lemma)
        if 0 < pairs["same_sense"][lemma == w].sum() < (lemma == w).sum()
    ]
    assert r["auroc_macro"] == pytest.approx(np.mean(aucs), abs=1e-12) and r["n_lemmas_macro"] == len(aucs)


def test_the_heldout_balanced_accuracy_is_a_threshold_chosen_on_the_other_lemmas():
    usages, pairs = make_usages(n_words=40, seed=11)
    rng = np.random.default_rng(12)
    sense = pd.factorize(usages["synset"])[0]
    x = rng.standard_normal((sense.max() + 1, 8))[sense] + rng.standard_normal((len(usages), 8)) * 1.5
    r = SeparationDesign(usages, pairs, permutations=19, seed=0).measure(x)
    # by hand: GroupKFold by lemma, each fold's cut the training pairs' best balanced accuracy by brute force
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = np.round(np.einsum("ij,ij->i", u[pairs["usage_a"]], u[pairs["usage_b"]]), 12)
    y = pairs["same_sense"].to_numpy()
    groups = pd.factorize(usages["lemma"] + "\x1fn")[0][pairs["usage_a"]]
    predicted = np.zeros(len(y), bool)
    for train, test in GroupKFold(n_splits=5).split(cos, y, groups):
        cuts = np.unique(cos[train])
        scores = [balanced_accuracy_score(y[train], cos[train] >= t) for t in cuts]
        predicted[test] = cos[test] >= cuts[int(np.argmax(scores))]
    expected = balanced_accuracy_score(y, predicted)
    assert r["heldout_balanced_accuracy"] == pytest.approx(expected, abs=1e-12)
    assert r["heldout_balanced_accuracy_ci_low"] < expected < r["heldout_balanced_accuracy_ci_high"]
    assert expected > 0.6


def test_the_paired_difference_against_itself_is_zero_and_against_chance_is_the_gain():
    usages, pairs = make_usages(n_words=40, seed=13)
    rng = np.random.default_rng(14)
    sense = pd.factorize(usages["synset"])[0]
    design = SeparationDesign(usages, pairs, permutations=19, seed=0)
    x = rng.standard_normal((sense.max() + 1, 8))[sense] + rng.standard_normal((len(usages), 8))
    r = design.measure(x)
    same = design.measure(x, control=r["cosines"])
    assert (
        same["control_difference"] == 0 and same["control_difference_ci_low"] == 0 == same["control_difference_ci_high"]
    )
    assert same["control_difference_p"] == 1.0
    word = pd.factorize(pd.Series(word_key(usages)))[0]
    layer0 = design.measure(rng.standard_normal((word.max() + 1, 8))[word])  # identical vectors in each word
    gained = design.measure(x, control=layer0["cosines"])
    assert gained["control_difference"] == pytest.approx(r["auroc"] - 0.5, abs=1e-12)
    assert gained["control_difference_ci_low"] > 0 and gained["control_difference_p"] == pytest.approx(1 / 201)


def test_the_knn_ceiling_counts_usages_whose_sense_recurs_in_their_word():
    usages, pairs = make_usages(n_words=30, seed=15)
    x = np.random.default_rng(16).standard_normal((len(usages), 4))
    x[[2, 9]] = np.nan
    r = SeparationDesign(usages, pairs, permutations=19, seed=0).measure(x)
    keys, senses = word_key(usages), usages["synset"].to_numpy()
    valid = ~np.isnan(x).any(1)
    used = [
        i
        for i in range(len(keys))
        if valid[i] and any(valid[j] and j != i and keys[j] == keys[i] for j in range(len(keys)))
    ]
    can = [
        any(valid[j] and j != i and keys[j] == keys[i] and senses[j] == senses[i] for j in range(len(keys)))
        for i in used
    ]
    assert r["knn_ceiling"] == pytest.approx(np.mean(can), abs=1e-15) and r["n_knn"] == len(used)
    assert r["knn_chance"] <= r["knn_ceiling"] and r["knn_ci_low"] <= r["knn_accuracy"] <= r["knn_ci_high"]
    assert r["auroc_coarse_ci_low"] <= r["auroc_coarse"] <= r["auroc_coarse_ci_high"]


def test_the_same_seed_gives_the_same_numbers():
    usages, pairs, lengths = shaped(n_words=30, seed=17)
    x = np.random.default_rng(18).standard_normal((len(usages), 6))
    one = SeparationDesign(usages, pairs, permutations=19, seed=3, lengths=lengths).measure(x)
    two = SeparationDesign(usages, pairs, permutations=19, seed=3, lengths=lengths).measure(x)
    for key, value in one.items():
        np.testing.assert_array_equal(value, two[key], err_msg=key)


def test_bad_shape_inputs_are_refused():
    usages, pairs, lengths = shaped(n_words=5, seed=0)
    with pytest.raises(ValueError, match="lengths must be one finite sentence length"):
        SeparationDesign(usages, pairs, lengths=lengths[:-1])
    with pytest.raises(ValueError, match="longer than the usage's position"):
        SeparationDesign(usages, pairs, lengths=usages["position"].to_numpy())
    with pytest.raises(ValueError, match="token_keys must be one integer per usage"):
        SeparationDesign(usages, pairs, token_keys=np.zeros(len(usages)))
