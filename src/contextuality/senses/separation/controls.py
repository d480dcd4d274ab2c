"""What a pair's cosine adds beyond the pair's shape and beyond layer 0, on a ``SeparationDesign``.

WordNet's examples are constructed, and the examples of one synset resemble each other in length and position:

* ``heldout_balanced_accuracy``: the WiC-style accuracy of "same sense if cos ≥ t", t chosen on the other
  lemmas (GroupKFold by lemma, the threshold maximising the training folds' balanced accuracy), scored with
  scikit-learn's ``balanced_accuracy_score`` on the held-out predictions.
* ``auroc_shape`` and ``auroc_cosine_shape``: the held-out AUROC of a logistic regression on the pair's shape
  alone (``design.SHAPE_FEATURES``: the two sentences' lengths and the target's positions) and on cosine +
  shape, both predicted on held-out lemmas (``cross_val_predict`` with GroupKFold).
* ``heldout_balanced_accuracy_shape``: the same held-out threshold design on the shape-only regression's score
  (its cut chosen on the training folds' own scores): what sentence shape alone reaches, with no model.
* ``auroc_gain_over_shape`` (W3a's headline): AUROC(cosine + shape) − AUROC(shape alone), both held out
  by lemma, its interval from the difference within each lemma resample (paired), p the share of resamples ≤ 0.
* ``auroc_stratified``: the cosine AUROC with same- and different-sense pairs compared only within a stratum of
  the length difference (|ΔL| = 0, 1, …, ``design.LENGTH_STRATA_CAP`` or more): Σ_s U_s / Σ_s P_s·N_s.
* ``auroc_same_token``: the AUROC over the pairs whose two stored units are the same token sequence (a rotary
  decoder's layer 0 is then exactly 0.5; same-form pairs can differ by a capital letter).
* ``auroc_macro``: the mean over lemmas (with both kinds of pair) of each lemma's own AUROC.
* ``control_difference``: AUROC(ℓ) − AUROC(layer 0) on the same pairs and the same lemma resamples (a paired
  bootstrap), given layer 0's pair cosines.

Every interval is a percentile interval over the design's lemma resamples (``SeparationDesign.auc_resamples``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import GroupKFold

from contextuality.senses.separation.pair_scores import (
    best_threshold,
    heldout_scores,
    heldout_threshold_predictions,
    interval,
    pair_auc,
    stratified_auc,
)


def auroc_variants(design, cos, pair_ok) -> dict:
    """The stratified, same-token and per-lemma (macro) AUROCs, each with its interval."""
    pos, neg = pair_ok & design.same, pair_ok & ~design.same
    out = {}
    if design.length_stratum is not None:
        value = stratified_auc(cos, pos, neg, design.length_stratum)
        low, high = interval(design.auc_resamples(cos, pos, neg, design.length_stratum))
        out.update(
            auroc_stratified=value,
            auroc_stratified_ci_low=low,
            auroc_stratified_ci_high=high,
            n_strata=int(np.unique(design.length_stratum[pos | neg]).size),
        )
    if design.same_token is not None:
        p, q = pos & design.same_token, neg & design.same_token
        low, high = interval(design.auc_resamples(cos, p, q))
        differ = pair_ok & ~design.same_token
        out.update(
            auroc_same_token=pair_auc(cos, p, q),
            auroc_same_token_ci_low=low,
            auroc_same_token_ci_high=high,
            n_pairs_same_token=int((p | q).sum()),
            n_pairs_token_differs=int(differ.sum()),
        )
    out.update(_macro_auroc(design, cos, pos, neg))
    return out


# the macro AUROC where no lemma has both same- and different-sense pairs
NO_MACRO_AUROC = {
    "auroc_macro": np.nan,
    "auroc_macro_ci_low": np.nan,
    "auroc_macro_ci_high": np.nan,
    "n_lemmas_macro": 0,
}


def _macro_auroc(design, cos, pos, neg) -> dict:
    """Each lemma's own AUROC (ranks within the lemma, ties ½), their mean and its lemma-bootstrap interval."""
    keep = pos | neg
    t = pd.DataFrame({"lemma": design.pair_lemma[keep], "cos": cos[keep], "pos": pos[keep].astype(np.float64)})
    if t.empty:
        return dict(NO_MACRO_AUROC)
    t["rank_pos"] = t.groupby("lemma")["cos"].rank(method="average") * t["pos"]
    per = t.groupby("lemma").agg(n_pos=("pos", "sum"), n=("pos", "size"), rank_pos=("rank_pos", "sum"))
    per = per[(per["n_pos"] > 0) & (per["n_pos"] < per["n"])]
    if per.empty:
        return dict(NO_MACRO_AUROC)
    n_pos, n_neg = per["n_pos"].to_numpy(), (per["n"] - per["n_pos"]).to_numpy()
    auc = (per["rank_pos"].to_numpy() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    weights = design.boot_lemma_counts[:, per.index.to_numpy()]
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ auc) / weights.sum(1)
    low, high = interval(boot)
    return {
        "auroc_macro": float(auc.mean()),
        "auroc_macro_ci_low": low,
        "auroc_macro_ci_high": high,
        "n_lemmas_macro": int(auc.size),
    }


def _folds(design, groups: np.ndarray):
    """GroupKFold by lemma over the given pairs (fewer folds when there are fewer lemmas); None if < 2."""
    k = min(design.folds, int(np.unique(groups).size))
    return GroupKFold(n_splits=k) if k >= 2 else None


def _balanced_accuracy(design, y, predicted, groups, name: str) -> dict:
    """scikit-learn's balanced accuracy of held-out predictions, and its interval over the lemma resamples."""
    sums = {
        key: np.bincount(groups, weights=values.astype(np.float64), minlength=design.n_lemmas)
        for key, values in (("tp", y & predicted), ("p", y), ("tn", ~y & ~predicted), ("n", ~y))
    }
    boot = {key: design.boot_lemma_counts @ value for key, value in sums.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        resampled = 0.5 * (boot["tp"] / boot["p"] + boot["tn"] / boot["n"])
    low, high = interval(resampled)
    return {name: float(balanced_accuracy_score(y, predicted)), f"{name}_ci_low": low, f"{name}_ci_high": high}


HELDOUT_KEYS = tuple(
    f"{name}{suffix}"
    for name in ("heldout_balanced_accuracy", "heldout_balanced_accuracy_shape", "auroc_gain_over_shape")
    for suffix in ("", "_ci_low", "_ci_high")
)


def heldout_measures(design, cos, pair_ok) -> dict:
    """The held-out threshold's balanced accuracy on the cosine and on the shape alone, the held-out AUROCs of
    shape and of cosine + shape, and the gain of the second over the first (paired over the lemma resamples)."""
    out = dict.fromkeys(HELDOUT_KEYS, np.nan)
    idx = np.flatnonzero(pair_ok)
    y, groups = design.same[idx], design.pair_lemma[idx]
    folds = _folds(design, groups) if idx.size else None
    # every training fold needs both kinds of pair (a threshold, a regression): else the measures are NaN
    if folds is None or any(y[train].all() or not y[train].any() for train, _ in folds.split(idx, y, groups)):
        return out
    predicted = np.zeros(idx.size, dtype=bool)
    for train, test in folds.split(idx, y, groups):
        predicted[test] = cos[idx[test]] >= best_threshold(y[train], cos[idx[train]])
    out.update(_balanced_accuracy(design, y, predicted, groups, "heldout_balanced_accuracy"))
    if design.shape is not None:
        shape = _shape_measures(design, pair_ok, idx, y, groups, folds)
        pos, neg = pair_ok & design.same, pair_ok & ~design.same
        scores = np.full(cos.size, np.nan)
        scores[idx] = heldout_scores(np.column_stack([cos[idx], design.shape[idx]]), y, groups, folds)
        resamples = design.auc_resamples(scores, pos, neg)
        low, high = interval(resamples)
        value = pair_auc(scores, pos, neg)
        gain = resamples - shape.pop("_resamples")  # paired: the same lemma resamples for both
        finite = gain[np.isfinite(gain)]
        gain_low, gain_high = interval(gain)
        out.update(
            shape,
            auroc_cosine_shape=value,
            auroc_cosine_shape_ci_low=low,
            auroc_cosine_shape_ci_high=high,
            auroc_gain_over_shape=value - shape["auroc_shape"],
            auroc_gain_over_shape_ci_low=gain_low,
            auroc_gain_over_shape_ci_high=gain_high,
            auroc_gain_over_shape_p=(1 + int(np.sum(finite <= 0))) / (finite.size + 1),
        )
    return out


def _shape_measures(design, pair_ok, idx, y, groups, folds) -> dict:
    """The shape-only held-out AUROC (with its lemma resamples, ``_resamples``) and balanced accuracy: they depend
    on the usable pairs only, so they are computed once for them."""
    key = np.packbits(pair_ok).tobytes()
    if key not in design.shape_cache:
        scores = np.full(pair_ok.size, np.nan)
        scores[idx], predicted = heldout_threshold_predictions(design.shape[idx], y, groups, folds)
        pos, neg = pair_ok & design.same, pair_ok & ~design.same
        resamples = design.auc_resamples(scores, pos, neg)
        low, high = interval(resamples)
        design.shape_cache[key] = {
            "auroc_shape": pair_auc(scores, pos, neg),
            "auroc_shape_ci_low": low,
            "auroc_shape_ci_high": high,
            "_resamples": resamples,
            **_balanced_accuracy(design, y, predicted, groups, "heldout_balanced_accuracy_shape"),
        }
    return dict(design.shape_cache[key])


def control_difference(design, cos, pair_ok, control, resamples=None) -> dict:
    """AUROC(ℓ) − AUROC(control) on the pairs usable in both, over the same lemma resamples (paired).

    ``resamples``: (pair_ok, values) of this layer's pooled AUROC, reused when the pairs are the same; the
    control's resamples are computed once per control (the same layer 0 at every layer)."""
    control = np.asarray(control, dtype=np.float64)
    if control.shape != cos.shape:
        raise ValueError(
            f"measure: control has {control.shape} pair cosines, this design {cos.shape}; pass "
            "layer 0's result['cosines'] of the same design"
        )
    both = pair_ok & ~np.isnan(control)
    pos, neg = both & design.same, both & ~design.same
    if not pos.any() or not neg.any():
        return {
            "control_difference": np.nan,
            "control_difference_ci_low": np.nan,
            "control_difference_ci_high": np.nan,
            "control_difference_p": np.nan,
        }
    control = np.where(both, control, 0.0)
    key = hashlib.sha1(control.tobytes() + np.packbits(both).tobytes()).hexdigest()
    if key not in design.control_cache:
        design.control_cache = {key: design.auc_resamples(control, pos, neg)}
    same_pairs = resamples is not None and np.array_equal(resamples[0], both)
    diff = (resamples[1] if same_pairs else design.auc_resamples(cos, pos, neg)) - design.control_cache[key]
    low, high = interval(diff)
    finite = diff[np.isfinite(diff)]
    return {
        "control_difference": pair_auc(cos, pos, neg) - pair_auc(control, pos, neg),
        "control_difference_ci_low": low,
        "control_difference_ci_high": high,
        "control_difference_p": (1 + int(np.sum(finite <= 0))) / (finite.size + 1),
    }
