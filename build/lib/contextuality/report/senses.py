"""The sense measures for people: each model's tables combined, the three figures, and the claims rows.

``contextuality.senses.combine`` joins each model's per-layer rows. The question (README, "Word senses"): every occurrence of a word passes through one output layer in
pretraining, so how does a model keep a polysemous word's senses apart? Three parts of the usual answer and
the paper's own reading are checked on each model, each HOLDS, FAILS or N/A with its numbers.
"""

from __future__ import annotations

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.senses.combine import SENSE_FIGURES

HOLDS, FAILS, NA = "HOLDS", "FAILS", "N/A"
ALPHA = 0.05
# The narrow cone: the layer's mean cosine between random words above this in most layers above the input.
CONE_THRESHOLD = 0.1


def _series(table: pd.DataFrame, measure: str, preprocessing: str, column: str = "value") -> pd.Series:
    sub = table[(table["measure"] == measure) & (table["preprocessing"] == preprocessing)]
    return sub.set_index("layer")[column].sort_index()


# --------------------------------------------------------------------------------------------------
# Figures


def sense_figures(tables: dict[str, pd.DataFrame], labels: dict[str, str], outputs: dict[str, str], x_axis: str) -> None:
    """sense_separation, logit_lens and polysemy (png and pdf), one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contextuality.report.figures import plain_text

    drawers = {"sense_separation": _draw_separation, "logit_lens": _draw_lens, "polysemy": _draw_polysemy}
    for name in SENSE_FIGURES:
        fig, axes = plt.subplots(1, max(len(tables), 1), figsize=(5 * max(len(tables), 1), 3.8), squeeze=False)
        for ax, (model, table) in zip(axes[0], tables.items()):
            depth = max(int(table["layer"].max()), 1)
            scale = (lambda s: s.index / depth) if x_axis == "relative_depth" else (lambda s: s.index)
            drawers[name](ax, table, scale)
            ax.set_title(plain_text(labels.get(model, model)))
            ax.set_xlabel("relative depth" if x_axis == "relative_depth" else "layer")
        fig.tight_layout()
        for ext in ("png", "pdf"):
            with atomic_path(outputs[f"{name}_{ext}"]) as tmp:
                fig.savefig(tmp, format=ext, dpi=120, metadata={"CreationDate": None} if ext == "pdf" else {"Software": None})
        plt.close(fig)


def _draw_separation(ax, table: pd.DataFrame, scale) -> None:
    """AUROC of same- vs different-sense pairs per layer (chance 0.5), with the 95% interval; layer 0 is the control."""
    for kind, style in (("centred", "-"), ("standardised", "--")):
        auroc = _series(table, "auroc_same_sense", kind)
        if auroc.notna().any():
            low, high = _series(table, "auroc_same_sense", kind, "ci_low"), _series(table, "auroc_same_sense", kind, "ci_high")
            ax.plot(scale(auroc), auroc, style, marker="o", ms=3, label=f"AUROC, {kind}")
            ax.fill_between(scale(auroc), low, high, alpha=0.2)
            ax.plot(scale(auroc)[:1], auroc.iloc[:1], "ks", ms=6, label="layer 0 (surface-form control)" if kind == "centred" else None)
    ax.axhline(0.5, color="grey", lw=1, label="chance (label-permutation null)")
    ax.set_ylabel("same- vs different-sense AUROC")
    ax.legend(fontsize=7)


def _draw_lens(ax, table: pd.DataFrame, scale) -> None:
    """Median rank of the next token and of the token itself under the output layer, against unigram frequency."""
    drawn = False
    for name in ("next_token", "own_token"):
        rank = _series(table, f"{name}_median_rank", "hidden")
        if rank.notna().any():
            drawn = True
            line = ax.plot(scale(rank), rank + 1, marker="o", ms=3, label=f"{name.replace('_', ' ')}")[0]
            null = _series(table, f"{name}_median_rank", "hidden", "null") + 1
            ax.plot(scale(null), null, ":", color=line.get_color(), label=f"{name.replace('_', ' ')}: unigram baseline")
    if not drawn:
        notes = table[table["family"] == "output_layer"]["note"].dropna()
        ax.text(0.5, 0.5, (notes.iloc[0] if len(notes) else "not measured").replace(": ", ":\n", 1), ha="center",
                va="center", transform=ax.transAxes, fontsize=8, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_yscale("log")
    ax.set_ylabel("median rank + 1 (logit lens)")
    ax.legend(fontsize=7)


def _draw_polysemy(ax, table: pd.DataFrame, scale) -> None:
    """Standardised effect of log sense count on self-similarity, with and without context diversity; and diversity's."""
    for measure, label in (("beta_log_synsets", "log senses | diversity"),
                           ("beta_log_synsets_without_diversity", "log senses alone"),
                           ("beta_context_diversity", "context diversity")):
        beta = _series(table, measure, "centred")
        if beta.notna().any():
            low, high = _series(table, measure, "centred", "ci_low"), _series(table, measure, "centred", "ci_high")
            ax.plot(scale(beta), beta, marker="o", ms=3, label=label)
            ax.fill_between(scale(beta), low, high, alpha=0.2)
    ax.axhline(0, color="grey", lw=1)
    ax.set_ylabel("standardised beta on self-similarity (centred)")
    ax.legend(fontsize=7)


# --------------------------------------------------------------------------------------------------
# Claims


SENSE_CLAIMS = {
    "W1": "Context mixing: one word's occurrences get different vectors (centred self-similarity falls below the input layer's).",
    "W2": "A narrow cone: a layer's vectors share a direction (mean cosine between random words above 0.1 in most layers above the input).",
    "W3a": "Sense clusters, labelled: same-sense usages are closer than different-sense ones beyond the layer-0 control (AUROC and within-minus-between cosine, centred).",
    "W3b": "Sense clusters, unlabelled: polysemous words' occurrences are more clusterable than frequency-matched monosemous words' (cluster index, centred).",
    "W3c": "The output row near the word's average: each word's centroid is closer to its own output row than to a frequency-matched word's.",
    "W4": "The paper's reading: context variety, not polysemy, drives the variation (log sense count explains nothing once context diversity is in).",
}


def sense_claims(tables: dict[str, pd.DataFrame], anisotropy: dict[str, pd.Series], labels: dict[str, str]) -> pd.DataFrame:
    """One row per (model, claim): model, label, claim, statement, status, evidence."""
    rows = []
    for model, table in tables.items():
        for claim, check in (("W1", _w1), ("W2", lambda t: _w2(anisotropy.get(model))), ("W3a", _w3a), ("W3b", _w3b),
                             ("W3c", _w3c), ("W4", _w4)):
            status, evidence = check(table)
            rows.append({"model": model, "label": labels.get(model, model), "claim": claim,
                         "statement": SENSE_CLAIMS[claim], "status": status, "evidence": evidence})
    return pd.DataFrame(rows, columns=["model", "label", "claim", "statement", "status", "evidence"])


def _w1(table):
    selfsim = _series(table, "mean_self_similarity", "centred")
    if len(selfsim) < 2 or not selfsim.notna().any():
        return NA, "no self-similarity rows"
    low_layer = int(selfsim.iloc[1:].idxmin())
    drop = selfsim.iloc[0] - selfsim.loc[low_layer]
    return (HOLDS if drop > 0.1 else FAILS,
            f"layer 0: {selfsim.iloc[0]:.3f}; lowest, layer {low_layer}: {selfsim.loc[low_layer]:.3f} (drop {drop:.3f}; holds above 0.1)")


def _w2(anisotropy: pd.Series | None):
    if anisotropy is None or len(anisotropy) < 2:
        return NA, "no anisotropy in the layers table"
    upper = anisotropy.iloc[1:]
    share = float((upper > CONE_THRESHOLD).mean())
    return (HOLDS if share > 0.5 else FAILS,
            f"mean cosine between random words {upper.min():.2f}-{upper.max():.2f} in layers 1-{len(anisotropy) - 1}; "
            f"above {CONE_THRESHOLD} in {share:.0%} of them")


def _w3a(table):
    auroc = table[(table["measure"] == "auroc_same_sense") & (table["preprocessing"] == "centred")].set_index("layer")
    delta = table[(table["measure"] == "delta_within_between") & (table["preprocessing"] == "centred")].set_index("layer")
    if auroc.empty or not auroc["value"].notna().any():
        return NA, "no labelled usages measured"
    control = auroc["value"].iloc[0]
    upper = auroc.iloc[1:]
    best = int(upper["value"].idxmax()) if upper["value"].notna().any() else 0
    beyond = upper[(upper["ci_low"] > max(0.5, control)) & (delta.loc[upper.index, "p"] < ALPHA)]
    evidence = (f"AUROC layer 0 (control) {control:.3f}; best layer {best}: {auroc.loc[best, 'value']:.3f} "
                f"[{auroc.loc[best, 'ci_low']:.3f}, {auroc.loc[best, 'ci_high']:.3f}], within-minus-between cosine "
                f"{delta.loc[best, 'value']:.3f} (permutation p {delta.loc[best, 'p']:.3g}); "
                f"{len(beyond)} of {len(upper)} layers above the control with p < {ALPHA}; n = {int(auroc.loc[best, 'n'])} pairs")
    return (HOLDS if len(beyond) else FAILS), evidence


def _w3b(table):
    delta = table[(table["measure"] == "delta_cluster_index") & (table["preprocessing"] == "centred")].set_index("layer")
    if delta.empty or not delta["value"].notna().any():
        note = delta["note"].dropna().iloc[0] if not delta.empty and delta["note"].notna().any() else "no matched words"
        return NA, note
    significant = delta[(delta["value"] < 0) & (delta["p"] < ALPHA)]
    best = int(delta["value"].idxmin())
    return (HOLDS if len(significant) else FAILS,
            f"poly - mono cluster index, most negative at layer {best}: {delta.loc[best, 'value']:.4f} "
            f"[{delta.loc[best, 'ci_low']:.4f}, {delta.loc[best, 'ci_high']:.4f}], Mann-Whitney p {delta.loc[best, 'p']:.3g}; "
            f"{len(significant)} of {len(delta)} layers with poly more clusterable at p < {ALPHA}; n = {int(delta.loc[best, 'n'])} words")


def _w3c(table):
    rank = table[(table["measure"] == "alignment_median_rank")].set_index("layer")
    if rank.empty or not rank["value"].notna().any():
        notes = table[table["family"] == "output_layer"]["note"].dropna()
        return NA, notes.iloc[0] if len(notes) else "no output layer"
    last = int(rank.index.max())
    better = rank[rank["value"] < rank["null"]]
    return (HOLDS if last in better.index else FAILS,
            f"last layer {last}: median rank of the own row {rank.loc[last, 'value']:.0f} against {rank.loc[last, 'null']:.0f} "
            f"for a frequency-matched word's row; own row ranked better in {len(better)} of {len(rank)} layers; n = "
            f"{int(rank.loc[last, 'n'])} words")


def _w4(table):
    beta = table[(table["measure"] == "beta_log_synsets") & (table["preprocessing"] == "centred")].set_index("layer")
    diversity = table[(table["measure"] == "beta_context_diversity") & (table["preprocessing"] == "centred")].set_index("layer")
    if beta.empty or not beta["value"].notna().any():
        return NA, "regression not measurable (too few words)"
    upper = beta.iloc[1:] if len(beta) > 1 else beta
    polysemy_matters = upper[(upper["ci_high"] < 0)]
    diversity_matters = diversity.loc[upper.index][diversity.loc[upper.index, "ci_high"] < 0]
    evidence = (f"beta(log senses | diversity) below 0 with its 95% interval in {len(polysemy_matters)} of {len(upper)} "
                f"layers above the input (range {upper['value'].min():.3f} to {upper['value'].max():.3f}); "
                f"beta(context diversity) below 0 in {len(diversity_matters)}; n = {int(upper['n'].max())} words")
    holds = len(polysemy_matters) <= len(upper) // 4 and len(diversity_matters) > len(upper) // 2
    return (HOLDS if holds else FAILS), evidence


def sense_claims_section(claims: pd.DataFrame) -> list[str]:
    """Markdown lines for claims.md: the question, and each claim per model."""
    from contextuality.report.tables import md_text, pipe_table

    if claims.empty:
        return []
    md = ["", "## Word senses: how does a model tell a word's senses apart?", "",
          "Every occurrence of a word passes through one output layer in pretraining. The usual answer has three parts "
          "(W1-W3c); the paper's own reading is W4. Measured on centred vectors; sense labels from WordNet 3.0's example "
          "sentences (not SemCor or WiC: their scores are not comparable with published ones).", ""]
    rows = [[md_text(r["label"]), r["claim"], md_text(r["statement"]), f"**{r['status']}**", md_text(r["evidence"])]
            for _, r in claims.iterrows()]
    md += pipe_table(["model", "claim", "statement", "verdict", "evidence"], rows, "l-l-l").splitlines()
    return md + [""]
