"""The paper's claims checked on this run: each claim on each model, and the Markdown report (claims.md).

``evaluate_claims`` checks every claim of contextuality.paper.CLAIMS that applies (the acceptance checks
of the paper's findings (§4) and its abstract) on each model, with the paper's sampled baselines and
again with the exact ones, and says HOLDS, FAILS or N/A with the numbers behind it; ``claims_report``
writes them. Claims about one paper model are checked on the run's model mapped to it; when that model
has another depth, layer ranges are mapped by relative depth and the report says so. The checks are in
``report.claim_checks`` and ``report.table1_checks``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

import numpy as np
import pandas as pd

from contextuality.paper import CLAIMS, MIN_BASELINE_VECTORS, PAPER_LABELS, claims_for
from contextuality.report.claim_checks import LAYER_CHECKS, NA, ModelView, NotApplicable, Result
from contextuality.report.claim_sensitivity import claims_sensitivity, sensitivity_section
from contextuality.report.losses import losses_section
from contextuality.report.paper_models import check_paper_models, model_depth, model_role
from contextuality.report.table1_checks import A9_TOLERANCE, TABLE1_CHECKS
from contextuality.report.tables import md_text, pipe_table, write_text

# Claims about a model's last layer: the report notes when that layer is taken after the final norm.
LAST_LAYER_CLAIMS = frozenset({"A2", "A3", "A5a", "A5b", "A7a", "A7c", "A9c", "A9d"})
# Columns read in place of the sampled baselines and adjusted values for the exact-baseline verdict.
EXACT_COLUMNS = {
    "baseline_cosine": "baseline_cosine_exact", "baseline_mev": "baseline_mev_exact",
    "adjusted_self_similarity": "adjusted_self_similarity_exact",
    "adjusted_intra_sentence": "adjusted_intra_sentence_exact", "adjusted_mev": "adjusted_mev_exact",
}  # fmt: skip
# The check of each claim of contextuality.paper.CLAIMS, by id.
CHECKS: dict[str, Callable[[ModelView], Result]] = LAYER_CHECKS | TABLE1_CHECKS
# Claims comparing the run's numbers with those the paper measured on its own corpus (STS 2012-2016: its released
# per-layer statistics and Table 1's scores): N/A on another corpus, where a difference says as much about the
# sentences as about the model.
OWN_CORPUS_CLAIMS = ("A9d", "A10")


def evaluate_claims(
    layer_tables: dict[str, pd.DataFrame],
    word_tables: dict[str, pd.DataFrame] | None,
    labels: dict[str, str],
    paper_models: dict[str, str | None],
    *,
    sources: dict[str, dict] | None = None,
    table1: pd.DataFrame | None = None,
    corpus: dict | None = None,
    thresholds: Mapping[str, float] | None = None,
    trainings: dict[str, str] | None = None,
    only: Collection[str] | None = None,
) -> pd.DataFrame:
    """Evaluate every applicable claim on every model; one row per (model, claim).

    Columns: model, label, paper_model, stand_in, role (one sentence: paper checkpoint or stand-in),
    claim, about, statement, status (HOLDS/FAILS/N/A), evidence (the numbers), note (adaptations),
    status_exact and evidence_exact (the same claim with the exact baselines, ``baseline_*_exact``, in
    place of the paper's sampled ones; N/A when the table has no exact baselines). ``table1``: the
    run's ``table1.csv`` (claims A9a-d; None: N/A). A claim about the last layer notes when that layer
    is taken after the model's final norm (``after_final_norm``). ``thresholds``: numbers in place of those of
    ``claim_checks.THRESHOLDS`` (report.claim_sensitivity moves them). ``trainings``: each model's ``training``
    in the config (A3 names a sentence encoder's trained last layer; absent: unknown). ``only``: the ids of the
    claims to evaluate (None: every one).
    """
    check_paper_models(layer_tables, paper_models)
    word_tables, sources = word_tables or {}, sources or {}
    run_table1 = None
    if table1 is not None:
        run_table1 = table1[table1["source"] == "this run"] if "source" in table1.columns else table1
    rows = []
    for key, table in layer_tables.items():
        rows += _model_claims(
            key,
            table,
            labels.get(key, key),
            paper_models.get(key),
            sources.get(key),
            word_tables.get(key),
            run_table1,
            _other_corpus(corpus),
            thresholds or {},
            (trainings or {}).get(key, ""),
            only,
        )
    return pd.DataFrame(rows)


def _other_corpus(corpus: dict | None) -> str:
    """Why the own-corpus claims are N/A on a corpus that is not STS (its ``corpus.json`` record); '' for STS."""
    if corpus is None:
        return ""
    return (
        f"this run's corpus is not the paper's: {corpus['n_sentences']:,} sentences from corpus.source "
        f"'{corpus['source']}', while the paper's numbers were measured on STS 2012-2016"
    )


def _model_claims(
    key: str,
    table: pd.DataFrame,
    label: str,
    pm: str | None,
    source: dict | None,
    words: pd.DataFrame | None,
    table1: pd.DataFrame | None,
    other_corpus: str = "",
    thresholds: Mapping[str, float] | None = None,
    training: str = "",
    only: Collection[str] | None = None,
) -> list[dict]:
    """The rows of ``evaluate_claims`` for one model."""
    depth = model_depth(table)
    stand_in, role = model_role(key, label, depth, pm, source)
    indexed = table.set_index("layer").sort_index()
    m = ModelView(indexed, depth, pm, words, label, table1, thresholds or {}, training)
    exact_table = _exact_view(indexed)
    m_exact = replace(m, table=exact_table) if len(exact_table) else None
    final_norm = _final_norm_note(indexed, depth)
    too_few = _too_few_baseline_vectors(indexed) if m_exact is not None else ""
    rows = []
    for c in claims_for(pm):
        if only is not None and c.id not in only:
            continue
        status, evidence, note = _evaluate(c.id, m)
        if too_few:  # the sampled baselines are N/A: the claim is judged with the exact ones
            fallback = _evaluate(c.id, m_exact)
            if fallback[:2] != (status, evidence):
                status, evidence, note = fallback[0], fallback[1], "; ".join(filter(None, [too_few, fallback[2]]))
        status_exact, evidence_exact = (NA, "no exact baselines in the layers table")
        if m_exact is not None:
            status_exact, evidence_exact, _ = _evaluate(c.id, m_exact)
        if other_corpus and c.id in OWN_CORPUS_CLAIMS:
            status, evidence, note = NA, other_corpus, ""
            status_exact, evidence_exact = NA, other_corpus
        if c.about and stand_in:
            note = "; ".join(filter(None, [f"stand-in for {PAPER_LABELS[pm]}", note]))
        if final_norm and c.id in LAST_LAYER_CLAIMS:
            note = "; ".join(filter(None, [note, final_norm]))
        rows.append(
            {
                "model": key,
                "label": label,
                "paper_model": pm,
                "stand_in": stand_in,
                "role": role,
                "claim": c.id,
                "about": ", ".join(PAPER_LABELS[p] for p in c.about) or "all models",
                "statement": c.text,
                "status": status,
                "evidence": evidence,
                "note": note,
                "status_exact": status_exact,
                "evidence_exact": evidence_exact,
            }
        )
    return rows


def _too_few_baseline_vectors(table: pd.DataFrame) -> str:
    """Why the sampled baselines are N/A (drawn from fewer than MIN_BASELINE_VECTORS vectors), or ''."""
    if "n_baseline_vectors" not in table.columns:
        return ""
    counts = table["n_baseline_vectors"]
    if not (counts < MIN_BASELINE_VECTORS).any():
        return ""
    return (
        f"judged with the exact baselines: the sampled ones are N/A, drawn from {int(counts.min())} vectors, fewer "
        f"than {MIN_BASELINE_VECTORS} (a tiny corpus: pairs drawn with replacement would pair a vector with itself)"
    )


def _exact_view(table: pd.DataFrame) -> pd.DataFrame:
    """The layers table with the exact baselines (and the values adjusted by them) in the sampled ones' place."""
    if not all(column in table.columns for column in EXACT_COLUMNS.values()):
        return table.iloc[0:0]
    return table.assign(**{sampled: table[exact] for sampled, exact in EXACT_COLUMNS.items()})


def _evaluate(claim_id: str, m: ModelView) -> Result:
    """One claim's check on one model; a claim its outputs cannot check is N/A, with the reason."""
    try:
        return CHECKS[claim_id](m)
    except NotApplicable as reason:
        return NA, str(reason), ""


def _final_norm_note(table: pd.DataFrame, depth: int) -> str:
    """A note when the model's last layer is the hidden state after its final norm ('' otherwise)."""
    if "after_final_norm" not in table.columns or depth not in table.index:
        return ""
    if int(np.nan_to_num(table.loc[depth, "after_final_norm"])) != 1:
        return ""
    return (
        f"layer {depth} is the hidden state after the model's final norm (as transformers returns the last "
        "layer of a pre-norm decoder); every other layer is the raw residual stream"
    )


_INTRO = (
    "Ethayarajh (EMNLP 2019), *How Contextual are Contextualized Word Representations?* "
    "Each claim is evaluated on this run's numbers: **HOLDS**, **FAILS**, or **N/A** (not checkable "
    "with these outputs). Claims about one of the paper's models are checked on the run's model "
    "mapped to it; a stand-in is a different checkpoint, so a FAIL there says the claim does not "
    "carry over, not that the paper is wrong. *Adjusted* = raw minus the layer's anisotropy baseline. "
    "Every claim is checked with the paper's sampled baselines; *Exact baseline* gives the verdict "
    "with the exact baselines (every row, no sampling noise) in their place, and `(exact: ...)` marks "
    "a verdict that changes with them. The numeric thresholds are this project's operationalisation of the paper's "
    'words (its "nearly isotropic", "much more anisotropic", "almost monotonically" made into numbers), '
    "not numbers the paper states; *How the verdicts depend on the thresholds* moves each one."
)


def claims_report(
    layer_tables: dict[str, pd.DataFrame],
    word_tables: dict[str, pd.DataFrame] | None,
    labels: dict[str, str],
    paper_models: dict[str, str | None],
    out_md,
    *,
    sources: dict[str, dict] | None = None,
    losses: dict[str, dict] | None = None,
    table1: pd.DataFrame | None = None,
    extra_sections: list[str] | None = None,
    corpus: dict | None = None,
    trainings: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Check the paper's claims on this run and write them as Markdown; returns the results table.

    ``extra_sections``: Markdown lines appended before the losses (the word-senses claims). ``corpus``: the
    ``corpus.json`` record of a corpus that is not STS (None for STS): a section says what is absent and why,
    and the claims of ``OWN_CORPUS_CLAIMS`` are N/A.

    ``word_tables`` maps model keys to their words.parquet (needed for A6 and S5; missing
    ones give N/A). ``paper_models`` and ``sources`` are as in ``report.summary.summary_table``;
    ``table1`` is the run's table1.csv (claims A9a-d); ``trainings`` as in ``evaluate_claims``.
    """

    def evaluate(thresholds: dict[str, float] | None = None, only: list[str] | None = None) -> pd.DataFrame:
        # claims_sensitivity reads only the moved threshold's claims: the per-word tables (A6, S5) only for A6's
        words = word_tables if not thresholds or "A6 words at least" in thresholds else None
        return evaluate_claims(
            layer_tables, words, labels, paper_models, sources=sources, table1=table1, corpus=corpus,
            thresholds=thresholds, trainings=trainings, only=only,
        )  # fmt: skip

    results = evaluate()
    md = ["# The paper's claims, checked on this run", "", _INTRO, "", *corpus_section(corpus), "## Overview", ""]
    md += _overview(results, list(layer_tables), labels)
    for model, table in layer_tables.items():
        md += _model_section(results[results["model"] == model], model, labels.get(model, model), table)
    md += _unchecked_section(paper_models)
    md += sensitivity_section(claims_sensitivity(evaluate))
    md += extra_sections or []
    md += losses_section(losses or {}, labels)
    write_text(out_md, "\n".join(md))
    return results


def corpus_section(record: dict | None) -> list[str]:
    """Markdown lines on a corpus other than STS (its ``corpus.json`` record; none for STS): what was read,
    and why the STS-only parts are absent and the paper's numbers compare with another corpus's."""
    if record is None:
        return []
    where = record.get("path") or f"{record.get('dataset')} at {record.get('revision')}"
    return [
        "## The corpus", "",
        f"This run measured {record['n_sentences']:,} sentences from `{md_text(str(where))}` (corpus.source "
        f"'{record['source']}', sha256 `{record['sha256'][:16]}…`), not the paper's STS 2012-2016 sentences. "
        "There are no STS pairs or gold similarity scores (the STS-only steps did not run), and every number "
        "the claims quote from the paper was measured on STS: a verdict here says whether the paper's pattern "
        f"holds on this corpus, not whether its numbers are reproduced; the claims comparing this run's numbers with "
        f"the paper's own ({' and '.join(OWN_CORPUS_CLAIMS)}: its released per-layer statistics and Table 1's "
        "scores) are N/A.", "",
    ]  # fmt: skip


def _overview(results: pd.DataFrame, models: list[str], labels: dict[str, str]) -> list[str]:
    """Markdown lines: every claim's verdict per model (· where it does not apply), and what the columns mean."""
    rows = []
    for c in CLAIMS:
        sub = results[results["claim"] == c.id].set_index("model") if not results.empty else pd.DataFrame()
        cells = [_status_cell(sub.loc[m, "status"], sub.loc[m, "status_exact"]) if m in sub.index else "·"
                 for m in models]  # fmt: skip
        about = ", ".join(PAPER_LABELS[p] for p in c.about) or "all models"
        rows.append([c.id, about, c.source, *cells])
    header = ["Claim", "About", "Source"] + [md_text(labels.get(m, m)) for m in models]
    return [
        pipe_table(header, rows, "-" * len(header)),
        "",
        "Source: where the paper states it (Ethayarajh 2019, https://aclanthology.org/D19-1006/: its sections, "
        "figures and Table 1). `·` = the claim is about a paper model "
        "this model does not stand for. A9a-d compare the rows the paper's Table 1 shows: every static "
        f"baseline and each model's layers 1, 2, L-1 and L, with a tolerance of {A9_TOLERANCE}.",
        "",
    ]


def _model_section(sub: pd.DataFrame, model: str, label: str, table: pd.DataFrame) -> list[str]:
    """Markdown lines: one model's role, its degenerate words and each claim's verdict with its evidence."""
    md = [f"## {md_text(label)} (`{model}`)", "", md_text(sub["role"].iloc[0]) if not sub.empty else ""]
    degenerate = _degenerate_line(table)
    md += ["", degenerate] if degenerate else []
    rows = []
    for _, r in sub.iterrows():
        exact = r["status_exact"]
        if exact != r["status"] and exact != NA:
            exact = f"**{exact}**: {r['evidence_exact']}"
        rows.append([r["claim"], r["statement"], f"**{r['status']}**", r["evidence"], exact, r["note"]])
    header = ["Claim", "Statement", "Result", "Evidence", "Exact baseline", "Note"]
    return md + ["", pipe_table(header, rows, "-" * len(header)), ""]


def _unchecked_section(paper_models: dict[str, str | None]) -> list[str]:
    """Markdown lines: the claims about a paper model no model of the run stands for (none: no lines)."""
    covered = {pm for pm in paper_models.values() if pm}
    unchecked = [c for c in CLAIMS if c.about and not covered.intersection(c.about)]
    if not unchecked:
        return []
    return [
        "## Claims no model of this run can check",
        "",
        "No model of this run stands for the paper model these claims are about.",
        "",
        *(f"- **{c.id}** ({', '.join(PAPER_LABELS[p] for p in c.about)}): {c.text}" for c in unchecked),
        "",
    ]


def _degenerate_line(table: pd.DataFrame) -> str:
    """One sentence: how many words per layer have no MEV because all their occurrences are identical."""
    if "n_degenerate_words" not in table.columns:
        return ""
    counts = table.set_index("layer")["n_degenerate_words"].astype(int).sort_index()
    upper = counts.loc[1:]
    text = (
        f"Degenerate words (every occurrence identical up to storage rounding, so no MEV): layer 0: {counts.get(0, 0)}"
    )
    if len(upper):
        text += f"; layers 1-{int(upper.index.max())}: {int(upper.min())}-{int(upper.max())}"
    return text + " (of " + str(int(table["n_words"].max())) + " words)." if "n_words" in table.columns else text + "."


def _status_cell(status: str, status_exact: str) -> str:
    """The verdict, with the exact-baseline verdict beside it when the two differ."""
    return status if status_exact == status or status_exact == NA else f"{status} (exact: {status_exact})"
