"""The sense measures on the WordNet usages' layer (A1-A3 and the controls of what the cosine adds), as rows of the long
table (``rows.Rows``), from ``design.SeparationDesign.measure``."""

from __future__ import annotations

from functools import partial

import numpy as np

from contextuality.senses.rows import PREPROCESSINGS, Rows
from contextuality.senses.separation import design
from contextuality.senses.vectors import preprocess

# separation rows measured on centred vectors only (SeparationDesign.measure's controls)
CENTRED_ONLY = frozenset(
    {
        "auroc_same_token",
        "auroc_stratified",
        "auroc_macro",
        "auroc_shape",
        "auroc_cosine_shape",
        "heldout_balanced_accuracy",
        "heldout_balanced_accuracy_shape",
        "auroc_gain_over_shape",
    }
)


def separation_rows(rows: Rows, context, stored: np.ndarray, mean, std) -> None:
    """A1-A3 on the WordNet usages: each usage's stored row, the same preprocessing as the STS layer; and what
    the cosine adds beyond the pairs' shape (WordNet's examples of one sense resemble each other) and beyond the
    layer-0 control. ``context``: the job's ``job.SenseContext`` (its usages' rows, notes and design; it keeps
    layer 0's cosines as the control)."""
    present = context.usage_rows >= 0
    for kind in PREPROCESSINGS:
        vectors = np.full((len(context.usages), stored.shape[1]), np.nan)
        vectors[present] = preprocess(stored[context.usage_rows[present]], mean, std, kind)
        # the shape, same-token, stratified and per-lemma controls on centred vectors only (the claims' and the
        # figure's; they double the separation's time): standardised vectors keep the measures of before
        r = context.design.measure(vectors, control=context.control.get(kind), controls=kind == "centred")
        if rows.layer == 0:
            context.control[kind] = r["cosines"]
        if context.split is not None:  # W3b's two-senses control reads the usages' vectors of this layer
            context.split.add_rows(rows, kind, vectors)
        _measure_rows(
            rows,
            r,
            kind,
            context.usage_note,
            context.token_note,
            permutations=context.design.permutations,
            bootstrap=context.design.bootstrap,
        )


def _measure_rows(
    rows: Rows, r: dict, kind: str, note: str, token_note: str, *, permutations: int, bootstrap: int
) -> None:
    """One layer's separation rows from ``SeparationDesign.measure``'s result (a missing key: NaN): A1 and A2,
    the controls of what the cosine adds (beyond shape, beyond layer 0), then A3."""
    measured = partial(rows.add, "separation", preprocessing=kind)

    def add(measure, *, value, **kw):  # a control not measured on these vectors gets no row
        if measure in CENTRED_ONLY and kind != "centred":
            return
        measured(measure, value=value, **kw)

    boot = f"95% interval over {bootstrap} lemma resamples"
    _pooled_rows(add, r, note, boot, permutations)
    _control_rows(add, r, token_note, boot, bootstrap, layer=rows.layer)
    _knn_rows(add, r, boot)


def _get(r: dict, key: str):
    return r.get(key, np.nan)


def _ci(r: dict, name: str) -> tuple:
    return _get(r, f"{name}_ci_low"), _get(r, f"{name}_ci_high")


def _pairs(r: dict) -> int:
    return r["n_pairs_same"] + r["n_pairs_different"]


def _pooled_rows(add, r: dict, note: str, boot: str, permutations: int) -> None:
    """A1 (within- minus between-sense cosine against label permutations) and A2 (the AUROC, fine and coarse)."""
    add(
        "delta_within_between",
        value=r["delta"],
        null=r["delta_null_mean"],
        ci=(r["delta_ci_low"], r["delta_ci_high"]),
        p=r["delta_p"],
        n=r["n_words_delta"],
        note=f"{note}; p against {permutations} label permutations within word forms (floor {1 / (permutations + 1):.2g})",
    )
    add("auroc_same_sense", value=r["auroc"], null=0.5, ci=_ci(r, "auroc"), n=_pairs(r), note=f"{note}; {boot}")
    add(
        "auroc_same_sense_coarse",
        value=r["auroc_coarse"],
        null=0.5,
        ci=_ci(r, "auroc_coarse"),
        n=r["n_pairs_same"] + r["n_pairs_coarse"],
        note=f"different-sense pairs whose lexicographer files differ; {boot}",
    )


def _control_rows(add, r: dict, token_note: str, boot: str, bootstrap: int, *, layer: int) -> None:
    """What the cosine adds beyond the pairs' shape (lengths, positions), and beyond layer 0 (from layer 1 on)."""
    pairs = _pairs(r)
    _chance_rows(
        add,
        r,
        (
            "auroc_same_token",
            _get(r, "n_pairs_same_token"),
            f"pairs of the same stored token sequence only: {token_note}",
        ),
        (
            "auroc_stratified",
            pairs,
            f"pairs compared within strata of the sentence-length difference (0 to {design.LENGTH_STRATA_CAP}+ "
            f"words, {_get(r, 'n_strata'):.0f} strata); {boot}",
        ),
        (
            "auroc_macro",
            _get(r, "n_lemmas_macro"),
            f"mean of each lemma's own AUROC (n: lemmas with both kinds of pair); {boot}",
        ),
    )
    _shape_rows(add, r, pairs, boot, bootstrap)
    _chance_rows(
        add,
        r,
        (
            "heldout_balanced_accuracy",
            pairs,
            f"same sense if cos >= t, t chosen on held-out lemmas ({design.FOLDS}-fold GroupKFold, best training "
            f"balanced accuracy); {boot}",
        ),
    )
    if layer > 0:
        add(
            "auroc_minus_layer0",
            value=_get(r, "control_difference"),
            null=0.0,
            ci=_ci(r, "control_difference"),
            p=_get(r, "control_difference_p"),
            n=pairs,
            note=f"AUROC here minus at layer 0 on the same pairs, paired bootstrap over {bootstrap} lemma resamples; "
            f"p: share of resamples <= 0 (floor {1 / (bootstrap + 1):.2g})",
        )


def _chance_rows(add, r: dict, *measures: tuple[str, int, str]) -> None:
    """A row per (measure, n, note) of ``r``'s value and interval under that name, against chance (0.5)."""
    for measure, n, note in measures:
        add(measure, value=_get(r, measure), null=0.5, ci=_ci(r, measure), n=n, note=note)


def _shape_rows(add, r: dict, pairs: int, boot: str, bootstrap: int) -> None:
    """The shape baselines held out by lemma, no model (what shape alone reaches), and W3a's headline: the gain
    of cosine + shape over shape alone, and shape alone's held-out accuracy."""
    _chance_rows(
        add,
        r,
        (
            "auroc_shape",
            pairs,
            "no model: a logistic regression on the pair's sentence lengths and target positions, "
            f"held out by lemma ({design.FOLDS}-fold GroupKFold); {boot}",
        ),
    )
    add(
        "auroc_cosine_shape",
        value=_get(r, "auroc_cosine_shape"),
        null=_get(r, "auroc_shape"),
        ci=_ci(r, "auroc_cosine_shape"),
        n=pairs,
        note=f"cosine + shape, the same held-out logistic regression; null: shape alone; {boot}",
    )
    _chance_rows(
        add,
        r,
        (
            "heldout_balanced_accuracy_shape",
            pairs,
            "no model: the same held-out threshold on the shape-only logistic regression's score (its cut chosen "
            f"on the training folds' own scores); {boot}",
        ),
    )
    add(
        "auroc_gain_over_shape",
        value=_get(r, "auroc_gain_over_shape"),
        null=0.0,
        ci=_ci(r, "auroc_gain_over_shape"),
        p=_get(r, "auroc_gain_over_shape_p"),
        n=pairs,
        note="held-out AUROC of cosine + shape minus shape alone, paired over the same "
        f"{bootstrap} lemma resamples; p: share of resamples <= 0 (floor {1 / (bootstrap + 1):.2g})",
    )


def _knn_rows(add, r: dict, boot: str) -> None:
    """A3: 1-NN sense accuracy against the leave-one-out majority, with its exact chance and ceiling."""
    add(
        "knn_accuracy",
        value=r["knn_accuracy"],
        null=r["knn_majority"],
        ci=_ci(r, "knn"),
        n=r["n_knn"],
        note=f"null: leave-one-out majority sense; exact chance {r['knn_chance']:.3f}; ceiling "
        f"{r['knn_ceiling']:.3f}; {boot}",
    )
    add(
        "knn_chance",
        value=r["knn_chance"],
        n=r["n_knn"],
        note="exact chance of 1-NN under random labels within each word form: sum n_s(n_s - 1) / n(n - 1)",
    )
    add(
        "knn_ceiling",
        value=r["knn_ceiling"],
        n=r["n_knn"],
        note="the most 1-NN can reach: the share of usages whose sense has another usage of the same word form",
    )
