"""The sense measures on the WordNet usages' layer (A1-A3 and the controls of what the cosine adds), as rows of the long
table (``rows.Rows``), from ``design.SeparationDesign.measure``."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class ControlRow:
    """One row of what the cosine adds: its measure, its note (``str.format`` fields: ``boot``, ``bootstrap``,
    ``floor``, ``folds``, ``cap``, ``strata``, ``token_note``), the key of ``SeparationDesign.measure``'s result
    it reads (default: the measure; its interval under ``{key}_ci_low``/``_high``), its null (a number or a key),
    its n (a key, or the pairs), whether the result holds a p (``{key}_p``), and the first layer it is taken at."""

    measure: str
    note: str
    key: str = ""
    null: float | str = 0.5
    n: str = "pairs"
    p: bool = False
    from_layer: int = 0


# beyond the pairs' shape (lengths, positions), and beyond layer 0 (from layer 1 on): in the table's order
CONTROL_ROWS = (
    ControlRow("auroc_same_token", "pairs of the same stored token sequence only: {token_note}", n="n_pairs_same_token"),
    ControlRow("auroc_stratified", "pairs compared within strata of the sentence-length difference (0 to {cap}+ "
               "words, {strata:.0f} strata); {boot}"),
    ControlRow("auroc_macro", "mean of each lemma's own AUROC (n: lemmas with both kinds of pair); {boot}",
               n="n_lemmas_macro"),
    ControlRow("auroc_shape", "no model: a logistic regression on the pair's sentence lengths and target positions, "
               "held out by lemma ({folds}-fold GroupKFold); {boot}"),
    ControlRow("auroc_cosine_shape", "cosine + shape, the same held-out logistic regression; null: shape alone; "
               "{boot}", null="auroc_shape"),
    ControlRow("heldout_balanced_accuracy_shape", "no model: the same held-out threshold on the shape-only logistic "
               "regression's score (its cut chosen on the training folds' own scores); {boot}"),
    ControlRow("auroc_gain_over_shape", "held-out AUROC of cosine + shape minus shape alone, paired over the same "
               "{bootstrap} lemma resamples; p: share of resamples <= 0 (floor {floor:.2g})", null=0.0, p=True),
    ControlRow("heldout_balanced_accuracy", "same sense if cos >= t, t chosen on held-out lemmas ({folds}-fold "
               "GroupKFold, best training balanced accuracy); {boot}"),
    ControlRow("auroc_minus_layer0", "AUROC here minus at layer 0 on the same pairs, paired bootstrap over "
               "{bootstrap} lemma resamples; p: share of resamples <= 0 (floor {floor:.2g})", key="control_difference",
               null=0.0, p=True, from_layer=1),
)  # fmt: skip


def _control_rows(add, r: dict, token_note: str, boot: str, bootstrap: int, *, layer: int) -> None:
    """What the cosine adds beyond the pairs' shape (lengths, positions), and beyond layer 0 (from layer 1 on):
    a row per ``CONTROL_ROWS`` entry."""
    pairs = _pairs(r)
    fields = dict(boot=boot, bootstrap=bootstrap, floor=1 / (bootstrap + 1), folds=design.FOLDS,
                  cap=design.LENGTH_STRATA_CAP, strata=_get(r, "n_strata"), token_note=token_note)  # fmt: skip
    for row in CONTROL_ROWS:
        if layer < row.from_layer:
            continue
        key = row.key or row.measure
        null = _get(r, row.null) if isinstance(row.null, str) else row.null
        n = pairs if row.n == "pairs" else _get(r, row.n)
        p = _get(r, f"{key}_p") if row.p else np.nan
        add(row.measure, value=_get(r, key), null=null, ci=_ci(r, key), p=p, n=n, note=row.note.format(**fields))


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
