"""W3a's headline: the held-out AUROC of cosine + shape minus shape alone, paired over the lemma
resamples, and the shape-only held-out balanced accuracy, against known answers and a brute-force recomputation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import GroupKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from test_separation_size import shaped

from contextuality.senses.separation.design import SeparationDesign


def sense_vectors(usages, rng, noise):
    sense = pd.factorize(usages["synset"])[0]
    return rng.standard_normal((sense.max() + 1, 8))[sense] + rng.standard_normal((len(usages), 8)) * noise


def test_a_cosine_that_carries_only_shape_gains_nothing_over_shape():
    """Known answer: each usage's vector is a function of its sentence length (which the sense sets), so the pair
    cosine knows only the shape: the gain is ≈ 0 with 0 inside its interval, while shape alone sees the senses."""
    usages, pairs, lengths = shaped(n_words=120, seed=5, sense_sets_length=True)
    angle = lengths.astype(np.float64) * 0.7
    x = np.column_stack([np.cos(angle), np.sin(angle), np.full(len(angle), 0.3)])
    r = SeparationDesign(usages, pairs, permutations=19, bootstrap=200, seed=0, lengths=lengths).measure(x)
    assert r["auroc_shape_ci_low"] > 0.6 and r["heldout_balanced_accuracy_shape_ci_low"] > 0.55
    assert r["auroc_gain_over_shape_ci_low"] < 0 < r["auroc_gain_over_shape_ci_high"]
    assert abs(r["auroc_gain_over_shape"]) < 0.03


def test_a_cosine_that_knows_the_senses_gains_over_a_blind_shape():
    """Known answer: sense independent of shape, vectors set by the sense: shape alone is chance (accuracy ≈ 0.5),
    and the gain is the cosine's whole lead, far above 0."""
    usages, pairs, lengths = shaped(n_words=120, seed=6)
    x = sense_vectors(usages, np.random.default_rng(7), 0.8)
    r = SeparationDesign(usages, pairs, permutations=19, bootstrap=200, seed=0, lengths=lengths).measure(x)
    assert abs(r["heldout_balanced_accuracy_shape"] - 0.5) < 0.04 and r["heldout_balanced_accuracy"] > 0.7
    assert r["auroc_gain_over_shape"] == pytest.approx(r["auroc_cosine_shape"] - r["auroc_shape"], abs=1e-12)
    assert r["auroc_gain_over_shape_ci_low"] > 0.2 and r["auroc_gain_over_shape_p"] == pytest.approx(1 / 201)


def weighted_auc(score, y, weight):
    """The weighted Mann-Whitney AUROC by brute force over every (positive, negative) pair, ties ½."""
    p, q = np.flatnonzero(y), np.flatnonzero(~y)
    sp, sq = score[p][:, None], score[q][None, :]
    wins = (sp > sq) + 0.5 * (sp == sq)
    w = weight[p][:, None] * weight[q][None, :]
    return float((wins * w).sum() / w.sum())


def test_the_gain_and_the_shape_accuracy_equal_a_brute_force_recomputation():
    usages, pairs, lengths = shaped(n_words=24, seed=8, sense_sets_length=True)
    x = sense_vectors(usages, np.random.default_rng(9), 1.5)
    design = SeparationDesign(usages, pairs, permutations=9, bootstrap=40, seed=3, lengths=lengths)
    r = design.measure(x)
    # by hand: the pair cosines and shape, the held-out regressions per fold, each resample's weighted AUROCs
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = np.round(np.einsum("ij,ij->i", u[design.a], u[design.b]), 12)
    y, groups = design.same, design.pair_lemma
    folds = GroupKFold(n_splits=5)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    both = cross_val_predict(
        model, np.column_stack([cos, design.shape]), y, groups=groups, cv=folds, method="decision_function"
    )
    shape = cross_val_predict(model, design.shape, y, groups=groups, cv=folds, method="decision_function")
    gains = [
        weighted_auc(both, y, counts[groups]) - weighted_auc(shape, y, counts[groups])
        for counts in design.boot_lemma_counts
    ]
    assert r["auroc_gain_over_shape_ci_low"] == pytest.approx(np.percentile(gains, 2.5), abs=1e-9)
    assert r["auroc_gain_over_shape_ci_high"] == pytest.approx(np.percentile(gains, 97.5), abs=1e-9)
    ones = np.ones(design.n_lemmas)[groups]
    assert r["auroc_gain_over_shape"] == pytest.approx(weighted_auc(both, y, ones) - weighted_auc(shape, y, ones))
    # the shape accuracy: each fold's cut the training pairs' best balanced accuracy over their own scores
    predicted = np.zeros(len(y), bool)
    for train, test in folds.split(design.shape, y, groups):
        fitted = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(design.shape[train], y[train])
        seen = fitted.decision_function(design.shape[train])
        cuts = np.unique(seen)
        best = cuts[int(np.argmax([balanced_accuracy_score(y[train], seen >= t) for t in cuts]))]
        predicted[test] = fitted.decision_function(design.shape[test]) >= best
    assert r["heldout_balanced_accuracy_shape"] == pytest.approx(balanced_accuracy_score(y, predicted), abs=1e-12)
