"""Scores of sense pairs that need no design: AUROCs (pooled and within strata), percentile intervals of
bootstrap values, the held-out threshold and the held-out logistic regressions (``design``,
``controls``)."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.model_selection import cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits


def pair_auc(score, pos, neg) -> float:
    """scikit-learn's AUROC of positive against negative pairs (NaN without both)."""
    if not pos.any() or not neg.any():
        return np.nan
    keep = pos | neg
    return float(roc_auc_score(pos[keep], score[keep]))


def stratified_auc(score, pos, neg, strata) -> float:
    """Σ_s U_s / Σ_s P_s·N_s: positives compared with the negatives of their own stratum only."""
    count = total = 0.0
    for stratum in np.unique(strata[pos | neg]):
        p, q = pos & (strata == stratum), neg & (strata == stratum)
        if p.any() and q.any():
            weight = float(p.sum()) * float(q.sum())
            count, total = count + pair_auc(score, p, q) * weight, total + weight
    return count / total if total > 0 else np.nan


def interval(values) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap values (NaN when none is finite)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return np.nan, np.nan
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def best_threshold(y: np.ndarray, score: np.ndarray) -> float:
    """The cut t of "positive if score ≥ t" with the best balanced accuracy on (y, score): max TPR − FPR."""
    if y.all() or not y.any():  # one class in the training folds: no cut is better than another
        return np.inf if not y.any() else -np.inf
    fpr, tpr, thresholds = roc_curve(y, score)
    return float(thresholds[int(np.argmax(tpr - fpr))])


def heldout_threshold_predictions(
    features: np.ndarray, y: np.ndarray, groups: np.ndarray, folds
) -> tuple[np.ndarray, np.ndarray]:
    """The held-out logistic regression's decision values (as ``heldout_scores``) and its held-out predictions:
    "positive if value ≥ t", t the best balanced-accuracy cut of the training folds' own values (the threshold
    design of the cosine's held-out accuracy, on the regression's score)."""
    scores, predicted = np.full(y.size, np.nan), np.zeros(y.size, dtype=bool)
    with threadpool_limits(1):
        for train, test in folds.split(features, y, groups):
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(features[train], y[train])
            scores[test] = model.decision_function(features[test])
            predicted[test] = scores[test] >= best_threshold(y[train], model.decision_function(features[train]))
    return scores, predicted


def heldout_scores(features: np.ndarray, y: np.ndarray, groups: np.ndarray, folds) -> np.ndarray:
    """A standardised logistic regression's decision values, each pair predicted by the folds without its lemma."""
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    with threadpool_limits(1):
        return cross_val_predict(model, features, y, groups=groups, cv=folds, method="decision_function")
