"""The sense measures for people: the claims W1-W4 on each model's sense table, their thresholds' sensitivity
and the claims' section of claims.md.

``contextuality.senses.combine`` joins each model's per-layer rows; ``report.sense_figures`` draws them. The
question (docs/findings.md, "Word senses"): every occurrence of a word passes through one output layer in
pretraining, so how does a model keep a polysemous word's senses apart? Three parts of the usual answer and
the paper's own reading are checked on each model, each HOLDS, FAILS or N/A with its numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from contextuality.report.output_claim import w3c
from contextuality.report.polysemy_claim import w4
from contextuality.report.sense_table import (  # noqa: F401  (ALPHA, layer_series, format_p: this module's API too)
    ALPHA,
    FAILS,
    HOLDS,
    NA,
    ci_text,
    format_p,
    layer_series,
    note_floor,
    rows_of,
)

# The narrow cone: the layer's mean cosine between random words above this in most layers above the input.
CONE_THRESHOLD = 0.1


# The thresholds the verdicts use: ours, not the spec's or the paper's, so ``sensitivity`` moves each by half.
THRESHOLDS = {
    "W1 self-similarity drop": 0.1,  # W1 holds when centred self-similarity falls by more than this below layer 0
    "W2 cone cosine": CONE_THRESHOLD,  # W2: the mean cosine between random words above this ...
    "W2 share of layers": 0.5,  # ... in more than this share of the layers above the input
    "W3a alpha": ALPHA,  # W3a: the paired bootstrap's p below this (and the intervals above their baselines)
    "W3b alpha": ALPHA,  # W3b: Mann-Whitney p of poly - mono (and of the pseudo-words' positive control) below this
    "W4 polysemy share": 0.25,  # W4 holds when log senses' interval is below 0 in at most this share of the layers
    "W4 diversity share": 0.5,  # ... and context diversity's in more than this share
}
SENSITIVITY_FACTORS = (0.5, 1.5)


SENSE_CLAIMS = {
    "W1": "Context mixing: one word's occurrences get different vectors (centred self-similarity falls below the input layer's).",
    "W2": "A narrow cone: a layer's vectors share a direction (mean cosine between random words above 0.1 in most layers above the input).",
    "W3a": (
        "Sense separation with labels, at its real size: same-sense pairs of one word form are closer than "
        "different-sense pairs beyond the layer-0 control (paired bootstrap) and beyond the sentences' shape "
        "(within strata of the length difference; the headline: the held-out AUROC of cosine + shape above shape "
        "alone, paired over lemma resamples)."
    ),
    "W3b": (
        "Sense clusters without labels: polysemous words' occurrences are more clusterable than monosemous words' "
        "matched on STS and general frequency; the positive controls (pseudo-words of two one-sense words; two "
        "senses of one lemma and token) say whether the statistic can see two senses at all, and its power the "
        "smallest share of split words it would detect (FAILS: not detected, not shown absent)."
    ),
    "W3c": (
        "The output row near the contexts' average, beyond the residual stream: a decoder's centroid of the "
        "contexts followed by a token (B5, its training target) ranks that token's row near the top at the last "
        "layer, better than a frequency-matched token's row, and higher than the token's own centroid (B4) on the "
        "same tokens (paired: median rank difference below 0, Wilcoxon p < 0.05); B4 is shown beside it and at "
        "layer 1 (layer 0 excluded). With tied embeddings B4 cannot tell the input row carried up the residual "
        "stream from the output layer pulling the occurrences towards it (an untied model's B4 is ranked against "
        "each matrix); a masked LM's own-token prediction is read where it is trained, at masked positions."
    ),
    "W4": (
        "The paper's reading: context variety, not polysemy, drives the variation (log sense count explains "
        "nothing once context diversity, STS count, general frequency, length and POS are in; the verdict from the "
        "content words with a tagger's POS and lemma, stopwords and numerals out; all word forms beside it)."
    ),
}


def sense_claims(
    tables: dict[str, pd.DataFrame],
    anisotropy: dict[str, pd.Series],
    labels: dict[str, str],
    thresholds: dict[str, float] | None = None,
    only: str | None = None,
) -> pd.DataFrame:
    """One row per (model, claim): model, label, claim, statement, status, evidence. ``only``: that claim's rows
    alone (the sensitivity moves one claim's threshold)."""
    t = THRESHOLDS | (thresholds or {})
    rows = []
    for model, table in tables.items():
        for claim, check in _checks(anisotropy.get(model)):
            if only is not None and claim != only:
                continue
            status, evidence = check(table, t)
            rows.append(
                {
                    "model": model,
                    "label": labels.get(model, model),
                    "claim": claim,
                    "statement": SENSE_CLAIMS[claim],
                    "status": status,
                    "evidence": evidence,
                }
            )
    return pd.DataFrame(rows, columns=["model", "label", "claim", "statement", "status", "evidence"])


def _checks(anisotropy):
    return (
        ("W1", _w1),
        ("W2", lambda table, t: _w2(anisotropy, t)),
        ("W3a", _w3a),
        ("W3b", _w3b),
        ("W3c", w3c),  # report/output_claim.py: B4, B5 and a masked LM's rows
        ("W4", w4),  # report/polysemy_claim.py: two versions of one regression
    )


def sensitivity(
    tables: dict[str, pd.DataFrame], anisotropy: dict[str, pd.Series], labels: dict[str, str]
) -> pd.DataFrame:
    """Each threshold of ``THRESHOLDS`` moved by half (×0.5 and ×1.5), one at a time: the verdicts of the claims it
    enters, per model. Columns: model, label, claim, threshold, value, verdict at each factor and at ×1, changes."""
    base = sense_claims(tables, anisotropy, labels).set_index(["model", "claim"])["status"]
    rows = []
    for name, value in THRESHOLDS.items():
        claim = name.split()[0]
        moved = {}
        for f in SENSITIVITY_FACTORS:
            verdicts = sense_claims(tables, anisotropy, labels, {name: value * f}, only=claim)
            moved[f] = verdicts.set_index(["model", "claim"])["status"]
        for model in tables:
            verdicts = [
                moved[SENSITIVITY_FACTORS[0]][(model, claim)],
                base[(model, claim)],
                moved[SENSITIVITY_FACTORS[1]][(model, claim)],
            ]
            rows.append(
                {
                    "model": model,
                    "label": labels.get(model, model),
                    "claim": claim,
                    "threshold": name,
                    "value": value,
                    "at_half": verdicts[0],
                    "as_set": verdicts[1],
                    "at_one_and_a_half": verdicts[2],
                    "changes": len(set(verdicts)) > 1,
                }
            )
    return pd.DataFrame(rows).sort_values(["model", "claim", "threshold"], kind="stable").reset_index(drop=True)


def _w1(table, t):
    selfsim = layer_series(table, "mean_self_similarity", "centred")
    if len(selfsim) < 2 or not selfsim.notna().any():
        return NA, "no self-similarity rows"
    low_layer = int(selfsim.iloc[1:].idxmin())
    drop = selfsim.iloc[0] - selfsim.loc[low_layer]
    limit = t["W1 self-similarity drop"]
    return (
        HOLDS if drop > limit else FAILS,
        f"layer 0: {selfsim.iloc[0]:.3f}; lowest, layer {low_layer}: {selfsim.loc[low_layer]:.3f} (drop {drop:.3f}; holds above {limit:g})",
    )


def _w2(anisotropy: pd.Series | None, t):
    if anisotropy is None or len(anisotropy) < 2:
        return NA, "no anisotropy in the layers table"
    upper = anisotropy.iloc[1:]
    cone, share_needed = t["W2 cone cosine"], t["W2 share of layers"]
    share = float((upper > cone).mean())
    return (
        HOLDS if share > share_needed else FAILS,
        f"mean cosine between random words {upper.min():.2f}-{upper.max():.2f} in layers 1-{len(anisotropy) - 1}; "
        f"above {cone:g} in {share:.0%} of them (holds above {share_needed:.0%})",
    )


def _layer0_control(table) -> str:
    """What layer 0 is for this model, from its own rows: a rotary decoder's layer 0 holds no position, so pairs
    of the same stored token are identical vectors (AUROC exactly 0.5); a model that adds position embeddings
    there (MiniLM, GPT-2) sees each sentence's shape already."""
    same_token = rows_of(table, "auroc_same_token")["value"]
    if not len(same_token) or not np.isfinite(same_token.iloc[0]):
        return "layer 0"
    if abs(same_token.iloc[0] - 0.5) < 1e-9:
        return "layer 0 (no position there: same-token pairs identical, chance by construction)"
    return "layer 0 (position embeddings added there: a shape control, not a no-context one)"


def _w3a(table, t):
    auroc = rows_of(table, "auroc_same_sense")
    if auroc.empty or not auroc["value"].notna().any():
        return NA, "no labelled usages measured"
    alpha = t["W3a alpha"]
    gain, strata = rows_of(table, "auroc_minus_layer0"), rows_of(table, "auroc_stratified")
    shape, both = rows_of(table, "auroc_shape"), rows_of(table, "auroc_cosine_shape")
    over = rows_of(table, "auroc_gain_over_shape")
    upper = auroc.iloc[1:]
    if gain.empty or strata.empty or both.empty:  # a table of an older run: the control alone
        beyond = upper[upper["ci_low"] > max(0.5, auroc["value"].iloc[0])]
        best = int(upper["value"].idxmax()) if upper["value"].notna().any() else 0
        return (HOLDS if len(beyond) else FAILS), (
            f"AUROC layer 0 (control) {auroc['value'].iloc[0]:.3f}; best layer {best}: "
            f"{auroc.loc[best, 'value']:.3f} {ci_text(auroc.loc[best])} (no shape baselines in this table)"
        )
    # a table made before the gain over shape was measured: cosine + shape's interval above shape alone's value
    if over.empty:
        beyond_shape = both.loc[gain.index, "ci_low"] > shape.loc[gain.index, "value"]
    else:
        beyond_shape = (over.loc[gain.index, "ci_low"] > 0) & (over.loc[gain.index, "p"] < alpha)
    ok = (gain["p"] < alpha) & (gain["ci_low"] > 0) & (strata.loc[gain.index, "ci_low"] > 0.5) & beyond_shape
    best = int(upper["value"].idxmax())
    evidence = _w3a_evidence(table, best, over, rows_of(table, "heldout_balanced_accuracy_shape"))
    evidence += f"; {int(ok.sum())} of {len(upper)} layers beyond the control and the shape (p < {alpha:g})"
    return (HOLDS if ok.any() else FAILS), evidence + f"; n = {int(auroc.loc[best, 'n'])} pairs"


def _w3a_evidence(table, best: int, over: pd.DataFrame, shape_accuracy: pd.DataFrame) -> str:
    """W3a's numbers at its best layer: the gain over shape first (its headline), then the rest."""
    row = lambda name: rows_of(table, name).loc[best]  # noqa: E731
    auroc, gain, shape = row("auroc_same_sense"), row("auroc_minus_layer0"), row("auroc_shape")
    acc = row("heldout_balanced_accuracy")
    layer0 = rows_of(table, "auroc_same_sense").iloc[0]
    token = rows_of(table, "auroc_same_token")
    knn, delta, coarse = row("knn_accuracy"), row("delta_within_between"), row("auroc_same_sense_coarse")
    text = ""
    if not over.empty:
        g, upper = over.loc[best], over.iloc[1:]
        text = (
            f"gain of cosine + shape over shape alone (held out by lemma) at layer {best}: {g['value']:+.3f} {ci_text(g)}, "
            f"paired p {format_p(g['p'], note_floor(g['note']))}; {upper['value'].min():+.3f} to "
            f"{upper['value'].max():+.3f} over layers 1-{int(upper.index.max())}, {over['value'].iloc[0]:+.3f} at "
            f"{_layer0_control(table)}; "
        )
    accuracy = f"held-out balanced accuracy {acc['value']:.3f} {ci_text(acc)}"
    if not shape_accuracy.empty:
        accuracy += (
            f" against {shape_accuracy.loc[best, 'value']:.3f} {ci_text(shape_accuracy.loc[best])} from shape alone"
        )
    return text + (
        f"{accuracy}; cosine + shape AUROC {row('auroc_cosine_shape')['value']:.3f}, shape alone {shape['value']:.3f} "
        f"{ci_text(shape)}; AUROC {auroc['value']:.3f} {ci_text(auroc)} against layer 0's {layer0['value']:.3f} "
        f"({token['value'].iloc[0]:.3f} over pairs of the same stored token; {token['note'].iloc[0].split(': ', 1)[-1]}), "
        f"gain over layer 0 {gain['value']:+.3f} {ci_text(gain)}, paired bootstrap p {format_p(gain['p'], note_floor(gain['note']))}; "
        f"within strata of the length difference {row('auroc_stratified')['value']:.3f} {ci_text(row('auroc_stratified'))}; "
        f"per-lemma AUROC {row('auroc_macro')['value']:.3f}; coarse {coarse['value']:.3f} {ci_text(coarse)}; within- minus "
        f"between-sense cosine {delta['value']:.3f}, permutation p {format_p(delta['p'], note_floor(delta['note']))}; 1-NN "
        f"{knn['value']:.3f} {ci_text(knn)} (chance {row('knn_chance')['value']:.3f}, majority {knn['null']:.3f}, ceiling "
        f"{row('knn_ceiling')['value']:.3f})"
    )


def _w3b(table, t):
    delta = rows_of(table, "delta_cluster_index")
    if delta.empty or not delta["value"].notna().any():
        note = delta["note"].dropna().iloc[0] if not delta.empty and delta["note"].notna().any() else "no matched words"
        return NA, note
    alpha = t["W3b alpha"]
    significant = delta[(delta["value"] < 0) & (delta["p"] < alpha)]
    best = int(delta["value"].idxmin())
    pseudo = rows_of(table, "delta_cluster_index_pseudo")
    evidence = (
        f"poly - mono cluster index, most negative at layer {best}: {delta.loc[best, 'value']:.4f} "
        f"{ci_text(delta.loc[best])}, Mann-Whitney p {delta.loc[best, 'p']:.2g}; {len(significant)} of {len(delta)} "
        f"layers with poly more clusterable at p < {alpha:g}; n = {int(delta.loc[best, 'n'])} words"
    )
    if pseudo.empty or not pseudo["value"].notna().any():
        return (HOLDS if len(significant) else FAILS), evidence + "; no positive control in this table"
    seen = pseudo[(pseudo["value"] < 0) & (pseudo["p"] < alpha)]
    shares = {
        name: rows_of(table, f"share_gaussian_null_rejected{suffix}")["value"]
        for name, suffix in (("poly", ""), ("mono", "_mono"))
    }
    evidence += (
        f"; positive control: pseudo-words - mono {pseudo['value'].min():.3f} to {pseudo['value'].max():.3f}, "
        f"detected (p < {alpha:g}) in {len(seen)} of {len(pseudo)} layers (largest p {pseudo['p'].max():.2g}); "
        "Gaussian-null rejections "
        + ", ".join(f"{name} {v.min():.0%}-{v.max():.0%}" for name, v in shares.items() if len(v))
    )
    evidence += _w3b_real_senses(table, alpha)
    if not len(seen):
        return NA, evidence + ": the statistic does not see the pseudo-words' two clusters, so it cannot test senses"
    if not len(significant):
        return FAILS, "sense clusters not detected (which is not: no clusters): " + evidence
    return HOLDS, evidence


def _w3b_real_senses(table, alpha: float) -> str:
    """The real-sense positive control (two senses of one lemma and stored token) and the test's power."""
    two, share = rows_of(table, "delta_cluster_index_two_senses"), rows_of(table, "w3b_detectable_split_share")
    if two.empty or not two["value"].notna().any():
        return "; no two-senses control in this table (too few lemmas with two senses of 3+ usages)"
    seen = two[(two["value"] < 0) & (two["p"] < alpha)]
    text = (
        f"; real-sense positive control (two senses of one lemma and stored token, small balanced subsamples): "
        f"two-senses - mono {two['value'].min():.3f} to {two['value'].max():.3f}, detected in {len(seen)} of "
        f"{len(two)} layers (n = {int(two['n'].max())})"
    )
    reached = share["value"].dropna()
    if len(share):
        text += f"; power (splits the size of the two-senses control's): none detected in {len(share) - len(reached)} of {len(share)} layers even with every polysemous word split"
    if len(reached):
        span = f"{reached.min():.0%}" + (f"-{reached.max():.0%}" if reached.max() > reached.min() else "")
        text += f", detected once {span} of them are split in the other {len(reached)}"
    return text


def sense_claims_section(claims: pd.DataFrame, sensitivity_table: pd.DataFrame | None = None) -> list[str]:
    """Markdown lines for claims.md: the question, each claim per model, and the thresholds' sensitivity."""
    from contextuality.report.tables import md_text, pipe_table

    if claims.empty:
        return []
    md = [
        "",
        "## Word senses: how does a model tell a word's senses apart?",
        "",
        "Every occurrence of a word passes through one output layer in pretraining. The usual answer has three parts "
        "(W1-W3c); the paper's own reading is W4. Measured on centred vectors; sense labels from WordNet 3.0's example "
        "sentences (not SemCor or WiC: their scores are not comparable with published ones).",
        "",
    ]
    rows = [
        [md_text(r["label"]), r["claim"], md_text(r["statement"]), f"**{r['status']}**", md_text(r["evidence"])]
        for _, r in claims.iterrows()
    ]
    md += pipe_table(["model", "claim", "statement", "verdict", "evidence"], rows, "l-l-l").splitlines()
    if sensitivity_table is not None and len(sensitivity_table):
        md += [
            "",
            "### How much the verdicts depend on our thresholds",
            "",
            "The thresholds are ours. Each is moved by half (×0.5 and ×1.5), one at a time; **changes** marks a "
            "verdict that moves.",
            "",
        ]
        rows = [
            [
                md_text(r["label"]),
                r["claim"],
                md_text(r["threshold"]),
                f"{r['value']:g}",
                r["at_half"],
                r["as_set"],
                r["at_one_and_a_half"],
                "**changes**" if r["changes"] else "stable",
            ]
            for _, r in sensitivity_table.iterrows()
        ]
        md += pipe_table(
            ["model", "claim", "threshold", "value", "×0.5", "as set", "×1.5", ""], rows, "lllrlll-"
        ).splitlines()
    return md + [""]
