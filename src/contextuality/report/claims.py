"""This run's numbers next to the paper's, and the paper's claims checked on them.

``summary_table`` lays each model's per-layer values beside the paper's values for the
paper model it stands for. ``claims_report`` evaluates every checkable claim
(contextuality.paper.CLAIMS: the acceptance checks of paper-spec §7 and the abstract's
statements) on each model and says HOLDS, FAILS or N/A with the numbers behind it.
Claims about one paper model are checked on the run's model mapped to it; when that model
has another depth, layer ranges are mapped by relative depth and the report says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from contextuality.report.tables import fmt, latex_escape, latex_table, pipe_table, write_text
from contextuality.paper import (
    CLAIMS,
    PAPER_CHECKPOINTS,
    PAPER_DEPTH,
    PAPER_LABELS,
    PAPER_TABLE1,
    QUANTITIES,
    TABLE1_HEADERS,
    TABLE1_TASKS,
    claims_for,
    model_depth,
    is_paper_checkpoint,
    reference_value,
)

HOLDS, FAILS, NA = "HOLDS", "FAILS", "N/A"

# (layers.parquet column, short header) of the summary table, in order.
SUMMARY_COLUMNS = (
    ("baseline_cosine", "Baseline"),
    ("self_similarity", "SelfSim"),
    ("adjusted_self_similarity", "SelfSim adj"),
    ("adjusted_intra_sentence", "Intra adj"),
    ("mev", "MEV"),
    ("adjusted_mev", "MEV adj"),
)

# (layers.parquet column, short header) of the summary's second table per model: the exact baselines (no
# sampling), the values adjusted by them, and the degenerate words.
EXACT_SUMMARY_COLUMNS = (
    ("baseline_cosine", "Baseline"),
    ("baseline_cosine_exact", "Baseline exact"),
    ("adjusted_self_similarity_exact", "SelfSim adj exact"),
    ("adjusted_intra_sentence_exact", "Intra adj exact"),
    ("baseline_mev", "MEV base"),
    ("baseline_mev_exact", "MEV base exact"),
    ("adjusted_mev_exact", "MEV adj exact"),
    ("n_degenerate_words", "Degenerate words"),
)

A10_TOLERANCE = 0.05
A9_TOLERANCE = 0.03  # paper-spec §7 A9: "a suggested absolute tolerance of about ±0.03"
A9A_TASKS = ("SimLex999", "RW", "Google", "MSR", "SemEval2012_2")
A9B_TASKS = ("MEN", "WS353")
# Claims about a model's last layer: the report notes when that layer is taken after the final norm.
LAST_LAYER_CLAIMS = frozenset({"A2", "A3", "A5a", "A5b", "A7a", "A7c", "A9c", "A9d"})
# Columns read in place of the sampled baselines and adjusted values for the exact-baseline verdict.
EXACT_COLUMNS = {
    "baseline_cosine": "baseline_cosine_exact", "baseline_mev": "baseline_mev_exact",
    "adjusted_self_similarity": "adjusted_self_similarity_exact",
    "adjusted_intra_sentence": "adjusted_intra_sentence_exact", "adjusted_mev": "adjusted_mev_exact",
}  # fmt: skip
ISOTROPY_THRESHOLD = 0.05  # S1: a mean random cosine above this is clearly not isotropic
S3_MAX_RHO = -0.5  # S3: "almost monotonic" decrease = Spearman rho(layer, adjusted self-sim) at most this
A6_WORDS = ("and", "of", "'s", "the", "to")
S5_STOPWORDS = ("the", "of", "to", "and")


def _check_paper_models(layer_tables: dict, paper_models: dict) -> None:
    """Fail early on a paper model name other than elmo, bert, gpt2 or None."""
    for model in layer_tables:
        pm = paper_models.get(model)
        if pm is not None and pm not in PAPER_DEPTH:
            raise ValueError(f"paper model of {model!r} is {pm!r}; expected one of {sorted(PAPER_DEPTH)} or None")


def _nearest_paper_layer(layer: int, depth: int, paper_depth: int) -> int:
    """The paper layer at the same relative depth (rounded half up)."""
    return layer if depth == paper_depth else min(paper_depth, math.floor(layer * paper_depth / depth + 0.5))


def _role(model: str, label: str, depth: int, paper_model: str | None, source: str | None) -> tuple[bool, str]:
    """Whether the model stands in for (is not) its paper model, and one sentence saying which it is."""
    if paper_model is None:
        return False, f"{label} has no counterpart in the paper: only the general claims apply."
    name, ckpt, pdepth = PAPER_LABELS[paper_model], PAPER_CHECKPOINTS[paper_model], PAPER_DEPTH[paper_model]
    if is_paper_checkpoint(paper_model, source or model) and depth == pdepth:
        return False, f"{label} is the paper's own {name} checkpoint ({ckpt})."
    text = (f"{label} stands in for {name}: the paper's claims are about {ckpt} ({pdepth} layers); "
            f"{label} has {depth} layers")
    text += "." if depth == pdepth else ", so layer ranges are mapped by relative depth."
    return True, text


def _summary_frame(layer_tables, labels, paper_models) -> pd.DataFrame:
    """One row per model and layer: run values, the mapped paper layer and the paper's values."""
    rows = []
    for model, table in layer_tables.items():
        depth, pm = model_depth(table), paper_models.get(model)
        for _, r in table.sort_values("layer").iterrows():
            layer = int(r["layer"])
            row = {"model": model, "label": labels.get(model, model), "layer": layer, "paper_model": pm,
                   "paper_layer": None if pm is None else _nearest_paper_layer(layer, depth, PAPER_DEPTH[pm])}
            for col, _ in SUMMARY_COLUMNS:
                row[col] = float(r[col]) if col in r else np.nan
                ref = None if pm is None else reference_value(pm, col, row["paper_layer"])
                row[f"paper_{col}"] = np.nan if ref is None else ref[0]
                row[f"paper_{col}_approximate"] = None if ref is None else ref[1]
            rows.append(row)
    return pd.DataFrame(rows)


def _paper_cell(row, col: str) -> str:
    """The paper's value with its approximation mark (≈), or an en dash."""
    value = row[f"paper_{col}"]
    if not np.isfinite(value):
        return "–"
    return ("≈" if bool(row[f"paper_{col}_approximate"]) else "") + fmt(value)


def summary_table(layer_tables: dict[str, pd.DataFrame], labels: dict[str, str],
                  paper_models: dict[str, str | None], out_md, out_tex, *,
                  sources: dict[str, str] | None = None, losses: dict[str, dict] | None = None) -> pd.DataFrame:
    """Per model and layer, this run's values beside the paper's; written as Markdown and LaTeX.

    ``paper_models`` maps each model key to "elmo", "bert", "gpt2" or None; ``sources``
    (optional) maps it to its hub id, package, path or ELMo options file, to tell the paper's
    own checkpoint from a stand-in (without it the model key is compared).
    The paper column holds the [STATS] value ("≈" = approximate) at the same layer, or, for a
    model of another depth, at the nearest relative depth (column "Paper layer").
    Returns the table as a DataFrame.
    """
    _check_paper_models(layer_tables, paper_models)
    sources = sources or {}
    frame = _summary_frame(layer_tables, labels, paper_models)
    md = ["# This run's per-layer numbers beside the paper's", "",
          "Each run value is followed by the paper's value for the paper model the run's model stands for "
          "(column `paper`). `≈` marks values read off the author's released statistics (approximate, "
          "paper-spec §6.1-6.4); `–` marks no value. *Adj* = raw measure minus the layer's anisotropy "
          "baseline (MEV: minus the MEV baseline). For a model of another depth than its paper model the "
          "paper value is taken at the nearest relative depth (`Paper layer`).", ""]
    tex = ["% This run's per-layer numbers beside the paper's (generated by contextuality.claims).",
           "% Needs \\usepackage{booktabs}."]
    for model, rows in frame.groupby("model", sort=False):
        label, pm = rows["label"].iloc[0], paper_models.get(model)
        _, role = _role(model, label, model_depth(layer_tables[model]), pm, sources.get(model))
        cells = _summary_cells(rows)
        header = ["Layer", "Paper layer"] + [h for _, short in SUMMARY_COLUMNS for h in (short, "paper")]
        md += [f"## {label} (`{model}`)", "", role, "", pipe_table(header, cells, "r" * len(header)), ""]
        md += _exact_summary_md(layer_tables[model])
        tex += [_summary_tex(cells, label, role, model), ""]
        tex += _exact_summary_tex(layer_tables[model], label, model)
    md += losses_section(losses or {}, labels)
    write_text(out_md, "\n".join(md))
    write_text(out_tex, "\n".join(tex))
    return frame


def _summary_cells(rows: pd.DataFrame) -> list[list[str]]:
    """One model's rows of the summary: layer, paper layer, then each value beside the paper's."""
    cells = []
    for _, r in rows.iterrows():
        row = [str(int(r["layer"])), "–" if pd.isna(r["paper_layer"]) else str(int(r["paper_layer"]))]
        for col, _ in SUMMARY_COLUMNS:
            row += [fmt(r[col]), _paper_cell(r, col)]
        cells.append(row)
    return cells


def _tex_key(model: str) -> str:
    """The model key as it goes into a LaTeX label."""
    return re.sub(r"[^A-Za-z0-9]+", "-", model)


def _summary_tex(cells: list[list[str]], label: str, role: str, model: str) -> str:
    """The LaTeX table of one model's summary: a run and a paper column under each measure."""
    groups = ["", "Paper"] + [(short, 2) for _, short in SUMMARY_COLUMNS]
    header = ["Layer", "layer"] + ["run", "paper"] * len(SUMMARY_COLUMNS)
    caption = (latex_escape(f"{label}: per-layer values of this run beside the paper's. {role}") + " "
               + latex_escape("≈: approximate (released statistics); –: no value.", marks=True))
    return latex_table(header, cells, "r" * len(header), caption=caption, label=f"tab:summary-{_tex_key(model)}",
                       groups=groups)


def _exact_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]], bool]:
    """Header, rows and whether a layer is marked after the final norm, for the exact-baseline table."""
    t = table.sort_values("layer")
    present = [(col, short) for col, short in EXACT_SUMMARY_COLUMNS if col in t.columns]
    flags = t["after_final_norm"].fillna(0).astype(int).to_numpy() if "after_final_norm" in t.columns else np.zeros(len(t), int)
    rows = []
    for (_, r), flag in zip(t.iterrows(), flags):
        cells = [f"{int(r['layer'])}" + ("†" if flag else "")]
        for col, _ in present:
            cells.append(str(int(r[col])) if col == "n_degenerate_words" and np.isfinite(r[col]) else fmt(r[col]))
        rows.append(cells)
    return ["Layer"] + [short for _, short in present], rows, bool(flags.any())


_EXACT_NOTE = ("*Exact* baselines are the values the paper's estimates aim at, over every stored row without "
               "sampling (the cosine weighted as the paper samples: a sentence, then a token); *adj exact* = raw "
               "measure minus them. Degenerate words have every occurrence identical up to storage rounding "
               "(duplicate sentences, identical left contexts), so their MEV is undefined and left out.")
_FINAL_NORM_NOTE = "†: taken after the model's final norm (the last hidden state of a pre-norm decoder); the other layers before it."


def _exact_summary_md(table: pd.DataFrame) -> list[str]:
    """Markdown lines: the exact baselines, the values adjusted by them and the degenerate words, per layer."""
    if "baseline_cosine_exact" not in table.columns:
        return []
    header, rows, flagged = _exact_cells(table)
    return ["Exact baselines and degenerate words:", "", pipe_table(header, rows, "r" * len(header)), "",
            _EXACT_NOTE + (" " + _FINAL_NORM_NOTE if flagged else ""), ""]


def _exact_summary_tex(table: pd.DataFrame, label: str, model: str) -> list[str]:
    """The LaTeX version of ``_exact_summary_md``."""
    if "baseline_cosine_exact" not in table.columns:
        return []
    header, rows, flagged = _exact_cells(table)
    caption = latex_escape(f"{label}: the exact anisotropy baselines, the measures adjusted by them, and the "
                           "degenerate words per layer. " + _EXACT_NOTE.replace("*", ""))
    if flagged:
        caption += " " + latex_escape(_FINAL_NORM_NOTE, marks=True)
    return [latex_table(header, rows, "r" * len(header), caption=caption,
                        label=f"tab:summary-exact-{_tex_key(model)}"), ""]


LOSS_COLUMNS = [
    ("sentences_truncated", "Sentences truncated"), ("sentences_skipped", "Sentences skipped"),
    ("indexed_occurrences", "Indexed occurrences"), ("lost_truncated", "Lost to truncation"),
    ("lost_skipped", "Lost to skipping"), ("lost_spanning", "Lost to pieces spanning words"),
    ("lost_share", "Lost (share)"), ("misaligned_words", "Misaligned words (faithful)"),
]


def losses_frame(losses: dict[str, dict], labels: dict[str, str]) -> pd.DataFrame:
    """One row per model: what its length limit and its tokenizer kept from being stored and measured."""
    rows = []
    for model, entry in losses.items():
        lost = entry["indexed_occurrences_lost"]
        total = entry["indexed_occurrences"]
        rows.append({
            "model": model, "label": labels.get(model, model),
            "sentences_truncated": entry["sentences_truncated"], "sentences_skipped": entry["sentences_skipped"],
            "indexed_occurrences": total, "lost_truncated": lost["truncated"], "lost_skipped": lost["skipped"],
            "lost_spanning": lost["spanning"], "lost_share": sum(lost.values()) / total if total else 0.0,
            "misaligned_words": entry.get("misaligned_words", 0),
        })
    return pd.DataFrame(rows, columns=["model", "label"] + [column for column, _ in LOSS_COLUMNS])


def losses_section(losses: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """Markdown lines: per model, the occurrences that could not be measured, and why."""
    if not losses:
        return []
    frame = losses_frame(losses, labels)
    md = ["## What could not be stored", "",
          "Indexed occurrences a model could not store, so they are missing from its measurements: cut off "
          "at the model's length limit (`extraction.max_length_policy: truncate`), in skipped sentences "
          "(`skip`), or with no piece of their own because one piece spans two spaCy words (`cannot` -> "
          "`can` + `not`). Details: `results/embeddings/{model}/losses.json`.", ""]
    rows = [[f"{row['label']} (`{row['model']}`)"]
            + [f"{row[c]:.2%}" if c == "lost_share" else str(int(row[c])) for c, _ in LOSS_COLUMNS]
            for _, row in frame.iterrows()]
    header = ["Model"] + [title for _, title in LOSS_COLUMNS]
    return md + [pipe_table(header, rows, "-" + "r" * len(LOSS_COLUMNS)), ""]


@dataclass(frozen=True)
class _Model:
    """What a claim needs to know about one model of the run."""

    table: pd.DataFrame  # indexed by layer
    depth: int
    paper_model: str | None
    words: pd.DataFrame | None
    label: str = ""
    table1: pd.DataFrame | None = None  # this run's Table 1 rows (table1.csv, source "this run"), or None

    def col(self, name: str) -> pd.Series:
        """A layers.parquet column indexed by layer (all NaN when absent)."""
        if name not in self.table.columns:
            return pd.Series(np.nan, index=self.table.index)
        return self.table[name].astype(float)

    def span(self, first: int, last: int) -> tuple[int, int, str]:
        """The run's layers covering paper layers first..last of the paper model, and a note if mapped."""
        pdepth = PAPER_DEPTH[self.paper_model]
        if self.depth == pdepth:
            return first, last, ""
        lo, hi = -(-first * self.depth // pdepth), last * self.depth // pdepth
        return lo, hi, (f"relative depth: paper layers {first}-{last} of {pdepth} → layers {lo}-{hi} "
                        f"of {self.depth}")


Result = tuple[str, str, str]  # status, evidence, adaptation note


def _missing(values: pd.Series) -> bool:
    """True when any value needed by a claim is missing."""
    return values.empty or not np.isfinite(values.to_numpy(float)).all()


def _values(values: pd.Series) -> str:
    """'layer: value' pairs for evidence strings."""
    return ", ".join(f"{int(k)}: {v:.3f}" for k, v in values.items())


def _extreme(values: pd.Series, which: str) -> str:
    """'max 0.123 (layer 4)' for evidence strings; just the value when there is one."""
    if len(values) == 1:
        return f"{values.iloc[0]:.3f}"
    layer = values.idxmax() if which == "max" else values.idxmin()
    return f"{which} {values[layer]:.3f} (layer {int(layer)})"


def _bounded(values: pd.Series, limit: float, what: str, *, above: bool) -> Result:
    """HOLDS when every value is strictly above (or below) ``limit``; evidence names the extreme."""
    if _missing(values):
        return NA, f"{what} missing", ""
    bad = values[values <= limit] if above else values[values >= limit]
    evidence = f"{what}: {_extreme(values, 'min' if above else 'max')}"
    if bad.empty:
        return HOLDS, evidence, ""
    return FAILS, f"{evidence}; {'≤' if above else '≥'} {limit} at layers {list(map(int, bad.index))}", ""


def _all_below(values: pd.Series, limit: float, what: str) -> Result:
    """HOLDS when every value is below ``limit``."""
    return _bounded(values, limit, what, above=False)


def _all_above(values: pd.Series, limit: float, what: str) -> Result:
    """HOLDS when every value is above ``limit``."""
    return _bounded(values, limit, what, above=True)


# One evaluator per claim id; the statements are in contextuality.paper.CLAIMS.


def _a1a(m: _Model) -> Result:
    return _all_below(m.col("baseline_cosine").reindex([0]), 0.05, "baseline cosine at layer 0")


def _a1b(m: _Model) -> Result:
    base = m.col("baseline_cosine")
    if m.paper_model == "elmo":
        status, evidence, _ = _all_above(base.loc[1:], 0.1, "baseline cosine, layers ≥ 1")
        return status, evidence, "layer 0 excluded: the model stands for ELMo, whose input layer is the exception"
    return _all_above(base, 0.1, "baseline cosine, all layers")


def _a2(m: _Model) -> Result:
    base = m.col("baseline_cosine")
    lo, hi, note = m.span(2, 8)
    mid, _, _ = m.span(8, 12)
    if lo > hi or mid >= m.depth or _missing(base.loc[lo:]):
        return NA, f"needs finite baselines and at least 3 layers (depth {m.depth})", note
    band, rise, top = base.loc[lo:hi], base.loc[mid:], base.loc[m.depth]
    in_band = bool(band.between(0.5, 0.7).all())
    monotone = bool((np.diff(rise.to_numpy()) > 0).all())
    evidence = (f"layers {lo}-{hi}: {band.min():.3f}-{band.max():.3f} ({'inside' if in_band else 'outside'} 0.5-0.7); "
                f"layers {mid}-{m.depth}: {_values(rise)} ({'rising' if monotone else 'not monotone'}); "
                f"top layer {top:.3f}")
    return (HOLDS if in_band and monotone and top > 0.95 else FAILS), evidence, note


def _a3(m: _Model) -> Result:
    base = m.col("baseline_cosine")
    if m.depth < 2 or _missing(base.loc[m.depth - 1:]):
        return NA, "needs finite baselines in the last two layers", ""
    gap = base[m.depth - 1] - base[m.depth]
    note = "" if m.depth == PAPER_DEPTH["bert"] else f"penultimate layer {m.depth - 1} vs last layer {m.depth}"
    evidence = (f"baseline layer {m.depth - 1}: {base[m.depth - 1]:.3f}, layer {m.depth}: {base[m.depth]:.3f} "
                f"(gap {gap:+.3f})")
    return (HOLDS if gap > 0.1 else FAILS), evidence, note


def _a4(m: _Model) -> Result:
    value = m.col("self_similarity").get(0, np.nan)
    if not np.isfinite(value):
        return NA, "raw self-similarity at layer 0 missing", ""
    return (HOLDS if abs(value - 1.0) <= 0.001 else FAILS), f"raw self-similarity at layer 0: {value:.4f}", ""


def _a5a(m: _Model) -> Result:
    adj = m.col("adjusted_self_similarity")
    if m.depth < 2 or _missing(adj.reindex([1, m.depth])):
        return NA, "needs adjusted self-similarity at layer 1 and a distinct top layer", ""
    evidence = f"adjusted self-similarity layer 1: {adj[1]:.3f}, top layer {m.depth}: {adj[m.depth]:.3f}"
    return (HOLDS if adj[m.depth] < adj[1] else FAILS), evidence, ""


def _a5b(m: _Model) -> Result:
    status, evidence, _ = _all_below(m.col("adjusted_self_similarity").reindex([m.depth]), 0.05,
                                     f"adjusted self-similarity at the top layer {m.depth}")
    return status, evidence, "" if m.depth == PAPER_DEPTH["gpt2"] else "top layer stands for GPT-2's layer 12"


def _word_means(m: _Model) -> pd.Series | None:
    """Each word's self-similarity averaged over all layers (as the author's visualize.py), ascending.

    Uses the exact mean where words.parquet has it, else the sampled estimate.
    """
    if m.words is None or m.words.empty:
        return None
    values = m.words["self_similarity"]
    if "self_similarity_sampled" in m.words.columns:
        values = values.fillna(m.words["self_similarity_sampled"])
    return values.groupby(m.words["word"]).mean().dropna().sort_values(kind="stable")


def _a6(m: _Model) -> Result:
    means = _word_means(m)
    if means is None or len(means) < 5:
        return NA, "needs the per-word table (words.parquet) with at least 5 words", ""
    lowest = list(means.index[:5])
    hits = [w for w in lowest if w in A6_WORDS]
    evidence = (f"five lowest (mean over all layers, 0 included, as the author's code): {', '.join(lowest)}; "
                f"{len(hits)} of them in {{{', '.join(A6_WORDS)}}}")
    return (HOLDS if len(hits) >= 3 else FAILS), evidence, ""


def _a7a(m: _Model) -> Result:
    adj = m.col("adjusted_intra_sentence")
    if m.depth < 2 or _missing(adj.reindex([0, 1, m.depth])):
        return NA, "needs adjusted intra-sentence similarity at layers 0, 1 and a distinct top layer", ""
    note = "" if m.depth == PAPER_DEPTH["elmo"] else f"checked as layer 0 < layer 1 < top layer {m.depth}"
    evidence = (f"adjusted intra-sentence similarity layer 0: {adj[0]:.3f}, 1: {adj[1]:.3f}, "
                f"{m.depth}: {adj[m.depth]:.3f}")
    return (HOLDS if adj[0] < adj[1] < adj[m.depth] else FAILS), evidence, note


def _a7b(m: _Model) -> Result:
    return _all_above(m.col("adjusted_intra_sentence"), 0.0, "adjusted intra-sentence similarity")


def _a7c(m: _Model) -> Result:
    adj = m.col("adjusted_intra_sentence")
    lo, hi, note = m.span(2, 12)
    if lo > hi or _missing(adj):
        return NA, "needs adjusted intra-sentence similarity in every layer and at least 2 layers", note
    band = adj.loc[lo:hi]
    near_zero = bool((band.abs() <= 0.07).all())
    layer0_largest = adj.idxmax() == 0
    evidence = (f"layers {lo}-{hi}: {band.min():+.3f} to {band.max():+.3f} "
                f"({'within' if near_zero else 'outside'} ±0.07); largest value {_extreme(adj, 'max')}")
    return (HOLDS if near_zero and layer0_largest else FAILS), evidence, note


def _a8a(m: _Model) -> Result:
    return _all_below(m.col("mev").loc[1:], 0.05, "raw MEV, layers ≥ 1")


def _a8b(m: _Model) -> Result:
    mev = m.col("mev")
    lo, hi, note = m.span(2, 11)
    if lo > hi or _missing(mev.loc[lo:hi]):
        return NA, f"needs raw MEV in layers {lo}-{hi}", note
    mean = float(mev.loc[lo:hi].mean())
    return (HOLDS if 0.2 <= mean <= 0.4 else FAILS), f"mean raw MEV over layers {lo}-{hi}: {mean:.3f}", note


def _a10(m: _Model) -> Result:
    pdepth = PAPER_DEPTH[m.paper_model]
    if m.depth != pdepth:
        return NA, (f"depth {m.depth} differs from the paper's {pdepth}: no layer-by-layer comparison "
                    "(see the summary table for relative-depth values)"), ""
    gaps = []
    for quantity in QUANTITIES:
        run = m.col(quantity)
        for layer in range(pdepth + 1):
            ref = reference_value(m.paper_model, quantity, layer)
            if ref is not None and np.isfinite(run.get(layer, np.nan)):
                gaps.append((abs(run[layer] - ref[0]), quantity, layer))
    return _gap_verdict(gaps, A10_TOLERANCE, "values", "no comparable values")


def _gap_verdict(gaps: list[tuple[float, str, int]], tolerance: float, noun: str, none_text: str) -> Result:
    """HOLDS when every (gap, what, layer) is within ``tolerance`` of the paper; the evidence names the largest."""
    if not gaps:
        return NA, none_text, ""
    worst = max(gaps)
    within = sum(g <= tolerance for g, _, _ in gaps)
    evidence = (f"{within} of {len(gaps)} {noun} within ±{tolerance}; "
                f"largest gap {worst[0]:.3f} ({worst[1]}, layer {worst[2]})")
    return (HOLDS if within == len(gaps) else FAILS), evidence, ""


def _shown_rows(table1: pd.DataFrame) -> pd.DataFrame:
    """The rows the paper's Table 1 shows: every static baseline and each model's first two and last two
    contextual layers (1, 2, L-1 and L; layer 0 and the middle layers are left out, as in the paper)."""
    rows = table1[table1["layer"].isna()]
    layered = table1[table1["layer"].notna()]
    keep = [rows]
    for _, group in layered.groupby("model", sort=False):
        depth = int(group["layer"].max())
        shown = {layer for layer in (1, 2, depth - 1, depth) if 1 <= layer <= depth}
        keep.append(group[group["layer"].isin(shown)])
    return pd.concat(keep, ignore_index=True)


class _NotApplicable(Exception):
    """A claim that cannot be checked with this run's outputs; the message is the evidence."""


def _table1_parts(m: _Model) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the shown rows of the run's Table 1, this model's shown rows, Table 1's tasks with its scores)."""
    if m.table1 is None:
        raise _NotApplicable("no Table 1 in this run (static.enabled: false)")
    shown = _shown_rows(m.table1)
    mine = shown[(shown["model"] == m.label) & shown["layer"].notna()]
    if mine.empty:
        raise _NotApplicable(f"no Table 1 rows for {m.label}")
    tasks = [t for t in TABLE1_TASKS if t in shown.columns and np.isfinite(mine[t].to_numpy(float)).any()]
    return shown, mine, tasks


def _best(frame: pd.DataFrame, task: str) -> tuple[float, str]:
    values = frame[task].astype(float)
    if not np.isfinite(values).any():
        return float("nan"), ""
    i = values.idxmax()
    row = frame.loc[i]
    name = row["model"] if pd.isna(row["layer"]) else f"{row['model']}, layer {int(row['layer'])}"
    return float(values[i]), name


def _a9a(m: _Model) -> Result:
    shown, mine, tasks = _table1_parts(m)
    first = mine[mine["layer"].isin([1, 2])]
    tasks = [t for t in A9A_TASKS if t in tasks]
    if first.empty or not tasks:
        return NA, "needs Table 1 scores of layers 1-2 on SimLex999, RW, Google, MSR or SemEval2012(2)", ""
    misses, parts_text = [], []
    for task in tasks:
        own, _ = _best(first, task)
        best, who = _best(shown, task)
        parts_text.append(f"{TABLE1_HEADERS[task]} {own:.3f} (best {best:.3f}, {who})")
        if not own >= best - A9_TOLERANCE:
            misses.append(TABLE1_HEADERS[task])
    evidence = "best of layers 1-2: " + "; ".join(parts_text)
    if misses:
        evidence += f"; more than {A9_TOLERANCE} below the best on {', '.join(misses)}"
    return (FAILS if misses else HOLDS), evidence, "rows compared: each model's layers 1, 2, L-1, L and every static baseline"


def _a9b(m: _Model) -> Result:
    shown, mine, _ = _table1_parts(m)
    fasttext = shown[shown["layer"].isna() & shown["model"].astype(str).str.lower().str.replace(" ", "").str.contains("fasttext")]
    if fasttext.empty:
        return NA, "no FastText baseline in Table 1 (add its vectors under static.baselines)", ""
    misses, parts_text = [], []
    for task in A9B_TASKS:
        if task not in shown.columns:
            continue
        theirs, _ = _best(fasttext, task)
        own, who = _best(mine, task)
        parts_text.append(f"{TABLE1_HEADERS[task]}: FastText {theirs:.3f}, best row of the model {own:.3f} ({who})")
        if not theirs >= own - A9_TOLERANCE:
            misses.append(TABLE1_HEADERS[task])
    if not parts_text:
        return NA, "Table 1 has no MEN or WS353 scores", ""
    return (FAILS if misses else HOLDS), "; ".join(parts_text), ""


def _a9c(m: _Model) -> Result:
    shown, mine, tasks = _table1_parts(m)
    others = shown[~((shown["model"] == m.label) & shown["layer"].notna())]
    if others.empty:
        return NA, "no other model or baseline in Table 1 to compare with", ""
    worst = []
    for task in tasks:
        own_best = float(mine[task].astype(float).max())
        others_worst = float(others[task].astype(float).min())
        if np.isfinite(own_best) and np.isfinite(others_worst) and own_best < others_worst + A9_TOLERANCE:
            worst.append(TABLE1_HEADERS[task])
    needed = max(len(tasks) - 1, 1)
    rest = [TABLE1_HEADERS[t] for t in tasks if TABLE1_HEADERS[t] not in worst]
    evidence = (f"its rows are below every other row on {len(worst)} of {len(tasks)} tasks (needed: {needed})"
                + (f"; not on {', '.join(rest)}" if rest else ""))
    note = "rows compared: each model's layers 1, 2, L-1, L and every static baseline"
    return (HOLDS if len(worst) >= needed else FAILS), evidence, note


def _a9d(m: _Model) -> Result:
    pdepth = PAPER_DEPTH[m.paper_model]
    if m.depth != pdepth:
        return NA, f"depth {m.depth} differs from the paper's {pdepth}: no row-by-row comparison", ""
    _, mine, tasks = _table1_parts(m)
    name = PAPER_LABELS[m.paper_model]
    gaps = []
    for label, values in PAPER_TABLE1.items():
        if not label.startswith(f"{name}, Layer "):
            continue
        layer = int(label.rsplit(" ", 1)[1])
        row = mine[mine["layer"] == layer]
        for task in tasks:
            if len(row) and np.isfinite(float(row[task].iloc[0])):
                gaps.append((abs(float(row[task].iloc[0]) - values[task]), TABLE1_HEADERS[task], layer))
    return _gap_verdict(gaps, A9_TOLERANCE, "scores", "no comparable rows")


def _s1(m: _Model) -> Result:
    return _all_above(m.col("baseline_cosine").loc[1:], ISOTROPY_THRESHOLD, "baseline cosine, layers ≥ 1")


def _s2(m: _Model) -> Result:
    return _all_above(m.col("self_similarity") - m.col("baseline_cosine"), 0.0,
                      "self-similarity − baseline, all layers")


def _s3(m: _Model) -> Result:
    adj = m.col("adjusted_self_similarity")
    if m.depth < 2 or _missing(adj):
        return NA, "needs adjusted self-similarity in at least 3 layers", ""
    rho = float(spearmanr(adj.index.to_numpy(), adj.to_numpy()).statistic)
    evidence = (f"Spearman ρ(layer, adjusted self-similarity) = {rho:+.2f} over layers 0-{m.depth} "
                f"(threshold {S3_MAX_RHO}); layer 0: {adj[0]:.3f} → layer {m.depth}: {adj[m.depth]:.3f}")
    return (HOLDS if rho <= S3_MAX_RHO else FAILS), evidence, ""


def _s4(m: _Model) -> Result:
    return _all_below(m.col("adjusted_mev").loc[1:], 0.05, "adjusted MEV, layers ≥ 1")


def _s5(m: _Model) -> Result:
    means = _word_means(m)
    present = [w for w in S5_STOPWORDS if means is not None and w in means.index]
    if not present:
        return NA, f"none of {', '.join(S5_STOPWORDS)} is indexed (or no per-word table)", ""
    median = float(means.median())
    ranks = means.rank(pct=True)
    parts = [f"'{w}' {means[w]:.3f} (lowest {100 * ranks[w]:.0f}%)" for w in present]
    evidence = f"mean self-similarity over all layers: {'; '.join(parts)}; median word {median:.3f}"
    return (HOLDS if all(means[w] < median for w in present) else FAILS), evidence, ""


_EVALUATORS: dict[str, Callable[[_Model], Result]] = {
    "A1a": _a1a, "A1b": _a1b, "A2": _a2, "A3": _a3, "A4": _a4, "A5a": _a5a, "A5b": _a5b, "A6": _a6,
    "A7a": _a7a, "A7b": _a7b, "A7c": _a7c, "A8a": _a8a, "A8b": _a8b,
    "A9a": _a9a, "A9b": _a9b, "A9c": _a9c, "A9d": _a9d, "A10": _a10,
    "S1": _s1, "S2": _s2, "S3": _s3, "S4": _s4, "S5": _s5,
}


def _exact_view(table: pd.DataFrame) -> pd.DataFrame:
    """The layers table with the exact baselines (and the values adjusted by them) in the sampled ones' place."""
    if not all(column in table.columns for column in EXACT_COLUMNS.values()):
        return table.iloc[0:0]
    return table.assign(**{sampled: table[exact] for sampled, exact in EXACT_COLUMNS.items()})


def _evaluate(claim_id: str, m: _Model) -> Result:
    try:
        return _EVALUATORS[claim_id](m)
    except _NotApplicable as reason:
        return NA, str(reason), ""


def _final_norm_note(table: pd.DataFrame, depth: int) -> str:
    """A note when the model's last layer is the hidden state after its final norm ('' otherwise)."""
    if "after_final_norm" not in table.columns or depth not in table.index:
        return ""
    if int(np.nan_to_num(table.loc[depth, "after_final_norm"])) != 1:
        return ""
    return (f"layer {depth} is the hidden state after the model's final norm (as transformers returns the last "
            "layer of a pre-norm decoder); every other layer is the raw residual stream")


def evaluate_claims(layer_tables: dict[str, pd.DataFrame], word_tables: dict[str, pd.DataFrame] | None,
                    labels: dict[str, str], paper_models: dict[str, str | None], *,
                    sources: dict[str, str] | None = None, table1: pd.DataFrame | None = None) -> pd.DataFrame:
    """Evaluate every applicable claim on every model; one row per (model, claim).

    Columns: model, label, paper_model, stand_in, role (one sentence: paper checkpoint or stand-in),
    claim, about, statement, status (HOLDS/FAILS/N/A), evidence (the numbers), note (adaptations),
    status_exact and evidence_exact (the same claim with the exact baselines, ``baseline_*_exact``, in
    place of the paper's sampled ones; N/A when the table has no exact baselines). ``table1``: the
    run's ``table1.csv`` (claims A9a-d; None: N/A). A claim about the last layer notes when that layer
    is taken after the model's final norm (``after_final_norm``).
    """
    _check_paper_models(layer_tables, paper_models)
    word_tables, sources = word_tables or {}, sources or {}
    run_table1 = None
    if table1 is not None:
        run_table1 = table1[table1["source"] == "this run"] if "source" in table1.columns else table1
    rows = []
    for key, table in layer_tables.items():
        label, pm, depth = labels.get(key, key), paper_models.get(key), model_depth(table)
        stand_in, role = _role(key, label, depth, pm, sources.get(key))
        indexed = table.set_index("layer").sort_index()
        m = _Model(indexed, depth, pm, word_tables.get(key), label, run_table1)
        exact_table = _exact_view(indexed)
        m_exact = _Model(exact_table, depth, pm, word_tables.get(key), label, run_table1) if len(exact_table) else None
        final_norm = _final_norm_note(indexed, depth)
        for c in claims_for(pm):
            status, evidence, note = _evaluate(c.id, m)
            status_exact, evidence_exact = (NA, "no exact baselines in the layers table")
            if m_exact is not None:
                status_exact, evidence_exact, _ = _evaluate(c.id, m_exact)
            if c.about and stand_in:
                note = "; ".join(filter(None, [f"stand-in for {PAPER_LABELS[pm]}", note]))
            if final_norm and c.id in LAST_LAYER_CLAIMS:
                note = "; ".join(filter(None, [note, final_norm]))
            rows.append({"model": key, "label": label, "paper_model": pm, "stand_in": stand_in, "role": role,
                         "claim": c.id, "about": ", ".join(PAPER_LABELS[p] for p in c.about) or "all models",
                         "statement": c.text, "status": status, "evidence": evidence, "note": note,
                         "status_exact": status_exact, "evidence_exact": evidence_exact})
    return pd.DataFrame(rows)


def _degenerate_line(table: pd.DataFrame) -> str:
    """One sentence: how many words per layer have no MEV because all their occurrences are identical."""
    if "n_degenerate_words" not in table.columns:
        return ""
    counts = table.set_index("layer")["n_degenerate_words"].astype(int).sort_index()
    upper = counts.loc[1:]
    text = f"Degenerate words (every occurrence identical up to storage rounding, so no MEV): layer 0: {counts.get(0, 0)}"
    if len(upper):
        text += f"; layers 1-{int(upper.index.max())}: {int(upper.min())}-{int(upper.max())}"
    return text + " (of " + str(int(table["n_words"].max())) + " words)." if "n_words" in table.columns else text + "."


def _status_cell(status: str, status_exact: str) -> str:
    """The verdict, with the exact-baseline verdict beside it when the two differ."""
    return status if status_exact == status or status_exact == NA else f"{status} (exact: {status_exact})"


def claims_report(layer_tables: dict[str, pd.DataFrame], word_tables: dict[str, pd.DataFrame] | None,
                  labels: dict[str, str], paper_models: dict[str, str | None], out_md, *,
                  sources: dict[str, str] | None = None, losses: dict[str, dict] | None = None,
                  table1: pd.DataFrame | None = None) -> pd.DataFrame:
    """Check the paper's claims on this run and write them as Markdown; returns the results table.

    ``word_tables`` maps model keys to their words.parquet (needed for A6 and S5; missing
    ones give N/A). ``paper_models`` and ``sources`` are as in ``summary_table``; ``table1`` is the
    run's table1.csv (claims A9a-d).
    """
    results = evaluate_claims(layer_tables, word_tables, labels, paper_models, sources=sources, table1=table1)
    models = list(layer_tables)
    md = ["# The paper's claims, checked on this run", "",
          "Ethayarajh (EMNLP 2019), *How Contextual are Contextualized Word Representations?* "
          "Each claim is evaluated on this run's numbers: **HOLDS**, **FAILS**, or **N/A** (not checkable "
          "with these outputs). Claims about one of the paper's models are checked on the run's model "
          "mapped to it; a stand-in is a different checkpoint, so a FAIL there says the claim does not "
          "carry over, not that the paper is wrong. *Adjusted* = raw minus the layer's anisotropy baseline. "
          "Every claim is checked with the paper's sampled baselines; *Exact baseline* gives the verdict "
          "with the exact baselines (every row, no sampling noise) in their place, and `(exact: ...)` marks "
          "a verdict that changes with them.",
          "", "## Overview", ""]
    head = ["Claim", "About", "Source"] + [labels.get(m, m) for m in models]
    overview = []
    for c in CLAIMS:
        sub = results[results["claim"] == c.id].set_index("model") if not results.empty else pd.DataFrame()
        cells = [_status_cell(sub.loc[m, "status"], sub.loc[m, "status_exact"]) if m in sub.index else "·"
                 for m in models]  # fmt: skip
        about = ", ".join(PAPER_LABELS[p] for p in c.about) or "all models"
        overview.append([c.id, about, c.source, *cells])
    md += [pipe_table(head, overview, "-" * len(head)), "", "Source: sections of the methods spec (paper-spec.md). `·` = the claim is about a paper model "
           "this model does not stand for. A9a-d compare the rows the paper's Table 1 shows: every static "
           f"baseline and each model's layers 1, 2, L-1 and L, with a tolerance of {A9_TOLERANCE}.", ""]
    for model in models:
        sub = results[results["model"] == model]
        label = labels.get(model, model)
        md += [f"## {label} (`{model}`)", "", sub["role"].iloc[0] if not sub.empty else ""]
        degenerate = _degenerate_line(layer_tables[model])
        md += ["", degenerate] if degenerate else []
        rows = []
        for _, r in sub.iterrows():
            exact = r["status_exact"]
            if exact != r["status"] and exact != NA:
                exact = f"**{exact}**: {r['evidence_exact']}"
            rows.append([r["claim"], r["statement"], f"**{r['status']}**", r["evidence"], exact, r["note"]])
        header = ["Claim", "Statement", "Result", "Evidence", "Exact baseline", "Note"]
        md += ["", pipe_table(header, rows, "-" * len(header)), ""]
    covered = {pm for pm in paper_models.values() if pm}
    unchecked = [c for c in CLAIMS if c.about and not covered.intersection(c.about)]
    if unchecked:
        md += ["## Claims no model of this run can check", "",
               "No model of this run stands for the paper model these claims are about.", ""]
        md += [f"- **{c.id}** ({', '.join(PAPER_LABELS[p] for p in c.about)}): {c.text}" for c in unchecked]
        md.append("")
    md += losses_section(losses or {}, labels)
    write_text(out_md, "\n".join(md))
    return results
