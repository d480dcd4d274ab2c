"""The paper's four questions and Table 1 as findings (docs/findings.md), written from a run's tables.

Every number comes from ``results/metrics/{corpus}/{model}/layers.csv`` (the per-layer measures and the geometry
columns), ``postprocess.csv`` (all-but-the-top and standardised vectors), ``results/tables/table1.csv`` and
``claims.csv`` (the verdicts); the words that describe a trend ("rises", "falls") are chosen from the same numbers.
Models are the run's, in claims.csv's order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from contextuality.report.findings_run import Model, RunTables, each
from contextuality.report.findings_senses import verdict_word
from contextuality.report.tables import fmt, fmt_count, fmt_in_layers, fmt_layers, fmt_share, fmt_share_span, fmt_span


def claim_verdicts(run: RunTables, claims: tuple[str, ...]) -> str:
    """ "A1b holds on X and Y; A3 fails on X": each listed claim that the run checked, with its models."""
    said = []
    for claim in claims:
        by_word: dict[str, list[str]] = {}
        for m in run.models:
            status = run.verdict(m, claim)
            if status:
                by_word.setdefault(verdict_word(status, na="is not testable"), []).append(m.label)
        said += [f"{claim} {word} on {' and '.join(labels)}" for word, labels in by_word.items()]
    return "; ".join(said)


def _moves(first: float, second: float, up: str = "rises", down: str = "falls") -> str:
    return up if second > first else down


def anisotropy(run: RunTables) -> str:
    def one(m: Model) -> str:
        cosine = m.curve("baseline_cosine").dropna()
        middle = cosine.iloc[1:-1]
        peak = int(cosine.idxmax())
        text = f"from {fmt(cosine.iloc[0], 2)} (layer 0) to {fmt(cosine.max(), 2)} at layer {peak}"
        if len(middle):
            text += f", {fmt_span(middle.min(), middle.max())} in {fmt_in_layers(middle.index)}"
        final_norm = m.curve("after_final_norm")
        normed = " (the hidden state after the final norm)" if len(final_norm) and final_norm.iloc[-1] == 1 else ""
        return (
            text
            + f", and {_moves(cosine.iloc[-2], cosine.iloc[-1])} to {fmt(cosine.iloc[-1], 2)} at its last layer{normed}"
        )

    gaps = [
        (m.curve("baseline_cosine") - m.curve("baseline_cosine_exact")).abs().max()
        for m in run.models
        if m.curve("baseline_cosine_exact").notna().any()
    ]
    text = (
        "**Anisotropy.** The average cosine between random words: "
        + each(run.models, one, long=True)
        + f". The paper's claims: {claim_verdicts(run, ('A1b', 'S1', 'A2', 'A3'))}."
    )
    if gaps:
        text += (
            " The exact baselines (every row, no sampling) agree with the sampled ones (the paper's method) to within "
            f"{fmt(max(gaps), 2)} in every layer of every model."
        )
    return text


def self_similarity(run: RunTables) -> str:
    def lowest(m: Model) -> str:
        adjusted = m.curve("adjusted_self_similarity").dropna()
        return f"{fmt(adjusted.min(), 2)} at layer {int(adjusted.idxmin())}"

    upper = all(
        m.curve("adjusted_self_similarity").dropna().iloc[-1] < m.curve("adjusted_self_similarity").dropna().iloc[0]
        for m in run.models
    )
    back = [m.label for m in run.models if _last_turns_back(m.curve("adjusted_self_similarity").dropna())]
    text = (
        f"**Self-similarity (adjusted for anisotropy).** Representations {'get' if upper else 'do not all get'} more "
        "context-specific in upper layers: from "
        + each(run.models, lambda m: fmt(m.curve("adjusted_self_similarity").dropna().iloc[0], 2))
        + " at the input layer to "
        + each(run.models, lowest)
        + f" ({claim_verdicts(run, ('S3', 'A5a', 'A5b'))}). Stopwords among the most context-specific words "
        f"(S5): {claim_verdicts(run, ('S5',)).removeprefix('S5 ')}."
    )
    if back:
        text += f" The last layer of {' and '.join(back)} is again less context-specific than the one before it."
    return text


def _last_turns_back(curve: pd.Series) -> bool:
    return len(curve) > 2 and curve.iloc[-1] > curve.iloc[-2]


def intra_sentence(run: RunTables) -> str:
    def one(m: Model) -> str:
        intra = m.curve("adjusted_intra_sentence").dropna()
        if len(intra) < 3:
            return f"{fmt_span(intra.min(), intra.max())} in every layer"
        lower, upper = np.array_split(intra.iloc[1:].index.to_numpy(), 2)
        above = "above 0 in every layer" if (intra > 0).all() else f"{fmt_span(intra.min(), intra.max())}"
        return (
            f"{fmt(intra.iloc[0], 2)} at the input layer, {fmt_span(intra.loc[lower].min(), intra.loc[lower].max())} "
            f"in {fmt_in_layers(lower)} and {fmt_span(intra.loc[upper].min(), intra.loc[upper].max())} in "
            f"{fmt_in_layers(upper)} ({above})"
        )

    return (
        "**Intra-sentence similarity (adjusted).** "
        + each(run.models, one, long=True)
        + f". The paper's claims: {claim_verdicts(run, ('A7b', 'A7c'))}."
    )


def mev(run: RunTables) -> str:
    def one(m: Model) -> str:
        raw, baseline = m.curve("mev").dropna(), m.curve("baseline_mev").dropna()
        middle = raw.iloc[:-1] if len(raw) > 1 else raw
        text = (
            f"the first principal component explains {fmt_share_span(middle.min(), middle.max())} of a word's variance "
            f"in {fmt_in_layers(middle.index)} and {fmt_share(raw.iloc[-1])} at the last layer; the random-word "
            f"baseline is {fmt_span(baseline.min(), baseline.max())}"
        )
        adjusted = m.curve("adjusted_mev").dropna()
        if len(adjusted) and (adjusted < 0).mean() > 0.5:
            text += ", so its adjusted MEV is negative in most layers"
        return text

    return (
        "**Maximum explainable variance.** "
        + each(run.models, one, long=True)
        + f". The paper's claims: {claim_verdicts(run, ('A8a', 'A8b', 'S4'))}."
    )


def rogue_dimensions(m: Model) -> str | None:
    """The dimensions that carry the anisotropy (layers.csv's rogue columns, layers above the input)."""
    top1, top3 = m.curve("rogue_top1_share").iloc[1:].dropna(), m.curve("rogue_top3_share").iloc[1:].dropna()
    if top3.empty:
        return None
    dims = m.layers.set_index("layer")["rogue_dims"].astype(str)
    peak = int(top3.idxmax())
    return (
        f"in {m.label}, the top three dimensions ({', '.join(dims.loc[peak].split(',')[:3])} at layer {peak}) carry "
        f"{fmt_share_span(top3.min(), top3.max())} of the mean cosine between random words in "
        f"{fmt_in_layers(top3.index)}, the largest one alone {fmt_share_span(top1.min(), top1.max())}"
    )


def massive_activations(m: Model) -> str:
    """The massive activations of a model's layers, or that it has none."""
    rows = m.layers.set_index("layer")
    dims = rows["massive_dims"].dropna().astype(str) if "massive_dims" in rows else pd.Series(dtype=str)
    dims = dims[dims != ""]
    if dims.empty:
        return f"no massive activation in {m.label}"
    layers = dims.index
    named = sorted({d for text in dims for d in text.split(",")}, key=int)
    first = rows.loc[layers, "massive_first_position_share"].max()
    return (
        f"in {m.label}'s layers {fmt_layers(layers)}, dimension(s) {', '.join(named)} hold massive activations on up "
        f"to {fmt_count(rows.loc[layers, 'massive_occurrences'].max())} rows, up to {fmt_share(first, 1)} of them the "
        f"first word of a sentence; the mean vector norm is {fmt(rows['norm_mean'].iloc[0], 0)} at the input layer and "
        f"up to {fmt_count(rows.loc[layers, 'norm_mean'].max())} there, effective rank {fmt(rows['effective_rank'].iloc[0], 0)} "
        f"and {fmt_span(rows.loc[layers, 'effective_rank'].min(), rows.loc[layers, 'effective_rank'].max(), 0)}, "
        f"IsoScore {fmt_span(rows.loc[layers, 'isoscore'].min(), rows.loc[layers, 'isoscore'].max(), 3)} (an "
        f"isotropic Gaussian of the same shape: {fmt(rows.loc[layers, 'null_gaussian_isoscore'].mean(), 2)}), and the "
        f"baseline MEV {fmt_span(rows.loc[layers, 'baseline_mev'].min(), rows.loc[layers, 'baseline_mev'].max(), 3)}"
    )


def postprocessed(run: RunTables) -> str | None:
    """All-but-the-top and standardised vectors (postprocess.csv), where the run has them."""
    models = [m for m in run.models if m.postprocess is not None]
    if not models:
        return None

    def kind(m: Model, name: str, column: str) -> pd.Series:
        rows = m.postprocess[m.postprocess["postprocess"] == name]
        return rows.set_index("layer")[column].sort_index().dropna()

    abtt = [kind(m, "abtt", "baseline_cosine") for m in models]
    low, high = min(c.min() for c in abtt), max(c.max() for c in abtt)

    def selfsim(m: Model) -> str:
        after, before = kind(m, "abtt", "adjusted_self_similarity"), m.curve("adjusted_self_similarity").dropna()
        upper = "still grow more" if after.iloc[-1] < after.iloc[1 if len(after) > 1 else 0] else "no longer grow more"
        return (
            f"adjusted self-similarity {fmt_span(after.iloc[1:].min(), after.iloc[1:].max())} in "
            f"{fmt_in_layers(after.index[1:])} instead of {fmt_span(before.iloc[1:].min(), before.iloc[1:].max())}; its upper "
            f"layers {upper} context-specific ({fmt(after.iloc[-1], 2)} at the last layer)"
        )

    standard = each(
        models,
        lambda m: fmt_span(
            kind(m, "standardize", "baseline_cosine").min(), kind(m, "standardize", "baseline_cosine").max()
        ),
    )
    return (
        "- **Remove them and the picture changes.** After all-but-the-top (the mean and the top d/100 principal "
        f"components removed) the anisotropy is {fmt_span(low, high)} in every layer of every model; "
        + each(models, selfsim, long=True)
        + f". Standardising each dimension leaves an anisotropy of {standard}."
    )


TASK_NAMES = {"WS353": "WS-353", "SemEval2012_2": "SemEval-2012(2)"}


def table1(run: RunTables) -> str | None:
    """Which layers give the best static vectors (table1.csv: this run's rows, the first principal component)."""
    if run.table1 is None:
        return None
    rows = run.table1[run.table1["source"] == "this run"]
    tasks = [
        c for c in rows.columns if c not in ("source", "method", "model", "layer") and not c.startswith("coverage_")
    ]
    scores = rows.set_index("method")[tasks].astype(float)
    best = scores.idxmax()
    winner = best.value_counts().index[0]
    won = [t for t in tasks if best[t] == winner] if len(tasks) else []
    model = rows.set_index("method").loc[winner, "model"]
    own = rows[rows["model"] == model]
    ties = {int(layer) for task in won for layer in own.loc[own[task] >= own[task].max() - 1e-9, "layer"]}
    text = (
        f"**Table 1** (`results/tables/table1.md`). The first-principal-component embeddings of {model}'s layers "
        f"{fmt_layers(ties)} are the best static vectors in this run on {len(won)} of {len(tasks)} tasks ("
        + ", ".join(f"{TASK_NAMES.get(t, t)} {fmt(scores.loc[winner, t], 2)}" for t in won)
        + ")"
    )

    def lower_upper(label: str) -> str | None:
        mine = rows[rows["model"] == label].set_index("layer")[tasks].astype(float).mean(axis=1)
        if len(mine) < 3:
            return None
        lower, upper = np.array_split(mine.iloc[1:], 2)
        ranked, k = mine.sort_values(ascending=False), max(1, len(mine) // 4)
        word = "worse" if upper.mean() < lower.mean() else "better"
        return f"upper layers {word} than lower ones; best {fmt_in_layers(ranked.index[:k])}, worst {fmt_in_layers(ranked.index[-k:])}"

    text += "; averaged over the tasks, " + each(run.models, lambda m: lower_upper(m.label), long=True)
    return text + (
        f" ({claim_verdicts(run, ('A9a', 'A9c'))}). The layer-0 rows (each model's own input embeddings) are the static "
        "baseline; point `static.baselines` at GloVe or FastText files to add the paper's baselines."
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def paper_block(run: RunTables) -> str:
    """docs/findings.md's section on the paper's four questions and Table 1, from the run's tables."""
    geometry = [text for m in run.models if (text := rogue_dimensions(m))]
    paragraphs = [
        "![Figure 1: anisotropy](figures/anisotropy.png)",
        anisotropy(run),
        "![Figure 2: self-similarity](figures/self_similarity.png)",
        self_similarity(run),
        "![Figure 3: intra-sentence similarity](figures/intra_sentence.png)",
        intra_sentence(run),
        "![Figure 4: maximum explainable variance](figures/mev.png)",
        mev(run),
        "**Beyond the paper: what the anisotropy is made of** (`results/figures/{model}/geometry.png`, one per "
        "model; `rogue_dimensions.png`; `postprocess.csv`).\n"
        + "\n".join(
            line
            for line in (
                "- **A few dimensions are the anisotropy.** " + _sentence("; ".join(geometry)) if geometry else None,
                "- **Massive activations.** " + _sentence("; ".join(massive_activations(m) for m in run.models)),
                postprocessed(run),
            )
            if line
        ),
        "![Table 1 scores by layer](figures/table1_by_layer.png)",
        table1(run),
    ]
    return "\n\n".join(p for p in paragraphs if p)
