"""One check per claim on a model's per-layer and per-word numbers, and what every claim check shares.

A check takes a ``ModelView`` (what a claim needs to know about one model of the run) and returns a
``Result``: HOLDS, FAILS or N/A, the numbers behind the verdict, and a note on any adaptation (layer
ranges mapped by relative depth for a model of another depth). The statements are in
contextuality.paper.CLAIMS; the checks of Table 1's claims (A9a-d) are in ``report.table1_checks``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from contextuality.paper import PAPER_DEPTH, QUANTITIES, reference_value
from contextuality.report.paper_models import mapped_span

HOLDS, FAILS, NA = "HOLDS", "FAILS", "N/A"
Result = tuple[str, str, str]  # status, evidence, adaptation note

A10_TOLERANCE = 0.05  # A10: per-layer values within this of the released statistics
ISOTROPY_THRESHOLD = 0.05  # S1: a mean random cosine above this is clearly not isotropic
S3_MAX_RHO = -0.5  # S3: "almost monotonic" decrease = Spearman rho(layer, adjusted self-sim) at most this
# Every number a check compares with: the project's reading of the paper's words, by name (the
# first word names the claim; "A9" is A9a-d's). A ModelView's ``thresholds`` replaces some of them
# (report.claim_sensitivity moves each in turn).
THRESHOLDS: dict[str, float] = {
    "A1a baseline cosine below": 0.05,
    "A1b baseline cosine above": 0.1,
    "A2 band low": 0.5,
    "A2 band high": 0.7,
    "A2 top layer gap to 1 below": 0.05,  # the top layer's baseline above 1 - this (0.95)
    "A3 gap above": 0.1,
    "A4 tolerance": 0.001,
    "A5b adjusted self-similarity below": 0.05,
    "A6 words at least": 3,
    "A7c band half-width": 0.07,
    "A8a raw MEV below": 0.05,
    "A8b band low": 0.2,
    "A8b band high": 0.4,
    "A9 tolerance": 0.03,
    "A10 tolerance": A10_TOLERANCE,
    "S1 baseline cosine above": ISOTROPY_THRESHOLD,
    "S3 rho at most": S3_MAX_RHO,
    "S4 adjusted MEV below": 0.05,
}
# S4: the baseline decides the verdict at a layer where the raw MEV is at least this many times S4's threshold while
# the adjusted MEV is below it; attention-sink rows decide it when that layer's massive activations sit at the
# sentences' first position (a share of the carrying rows of at least SINK_FIRST_SHARE).
SINK_RAW_FACTOR = 2.0
SINK_FIRST_SHARE = 0.5
A6_WORDS = ("and", "of", "'s", "the", "to")
S5_STOPWORDS = ("the", "of", "to", "and")


@dataclass(frozen=True)
class ModelView:
    """What a claim needs to know about one model of the run."""

    table: pd.DataFrame  # indexed by layer
    depth: int
    paper_model: str | None
    words: pd.DataFrame | None
    label: str = ""
    table1: pd.DataFrame | None = None  # this run's Table 1 rows (table1.csv, source "this run"), or None
    thresholds: Mapping[str, float] = field(default_factory=dict)  # in place of those of THRESHOLDS
    training: str = ""  # the model's training in the config (pretrained, sentence-encoder, ...; "" unknown)

    def threshold(self, name: str) -> float:
        """The number a check compares with: ``thresholds``' where it has it, else THRESHOLDS'."""
        return self.thresholds.get(name, THRESHOLDS[name])

    def col(self, name: str) -> pd.Series:
        """A layers.parquet column indexed by layer (all NaN when absent)."""
        if name not in self.table.columns:
            return pd.Series(np.nan, index=self.table.index)
        return self.table[name].astype(float)

    def span(self, first: int, last: int) -> tuple[int, int, str]:
        """The run's layers covering paper layers first..last of the paper model, and a note if mapped."""
        return mapped_span(first, last, self.depth, PAPER_DEPTH[self.paper_model])


class NotApplicable(Exception):
    """A claim that cannot be checked with this run's outputs; the message is the evidence."""


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


def gap_verdict(gaps: list[tuple[float, str, int]], tolerance: float, noun: str, none_text: str) -> Result:
    """HOLDS when every (gap, what, layer) is within ``tolerance`` of the paper; the evidence names the largest."""
    if not gaps:
        return NA, none_text, ""
    worst = max(gaps)
    within = sum(g <= tolerance for g, _, _ in gaps)
    evidence = (
        f"{within} of {len(gaps)} {noun} within ±{tolerance}; largest gap {worst[0]:.3f} ({worst[1]}, layer {worst[2]})"
    )
    return (HOLDS if within == len(gaps) else FAILS), evidence, ""


def _word_means(m: ModelView) -> pd.Series | None:
    """Each word's self-similarity averaged over all layers (as the author's visualize.py), ascending.

    Uses the exact mean where words.parquet has it, else the sampled estimate.
    """
    if m.words is None or m.words.empty:
        return None
    values = m.words["self_similarity"]
    if "self_similarity_sampled" in m.words.columns:
        values = values.fillna(m.words["self_similarity_sampled"])
    return values.groupby(m.words["word"]).mean().dropna().sort_values(kind="stable")


# One check per claim id, in the order of contextuality.paper.CLAIMS.


def _a1a(m: ModelView) -> Result:
    return _all_below(
        m.col("baseline_cosine").reindex([0]), m.threshold("A1a baseline cosine below"), "baseline cosine at layer 0"
    )


def _a1b(m: ModelView) -> Result:
    base = m.col("baseline_cosine")
    if m.paper_model == "elmo":
        status, evidence, _ = _all_above(
            base.loc[1:], m.threshold("A1b baseline cosine above"), "baseline cosine, layers ≥ 1"
        )
        return status, evidence, "layer 0 excluded: the model stands for ELMo, whose input layer is the exception"
    return _all_above(base, m.threshold("A1b baseline cosine above"), "baseline cosine, all layers")


def _a2(m: ModelView) -> Result:
    base = m.col("baseline_cosine")
    lo, hi, note = m.span(2, 8)
    mid, _, _ = m.span(8, 12)
    if lo > hi or mid >= m.depth or _missing(base.loc[lo:]):
        return NA, f"needs finite baselines and at least 3 layers (depth {m.depth})", note
    band, rise, top = base.loc[lo:hi], base.loc[mid:], base.loc[m.depth]
    low, high = m.threshold("A2 band low"), m.threshold("A2 band high")
    in_band = bool(band.between(low, high).all())
    monotone = bool((np.diff(rise.to_numpy()) > 0).all())
    evidence = (
        f"layers {lo}-{hi}: {band.min():.3f}-{band.max():.3f} ({'inside' if in_band else 'outside'} {low:g}-{high:g}); "
        f"layers {mid}-{m.depth}: {_values(rise)} ({'rising' if monotone else 'not monotone'}); "
        f"top layer {top:.3f}"
    )
    return (
        (HOLDS if in_band and monotone and top > 1 - m.threshold("A2 top layer gap to 1 below") else FAILS),
        evidence,
        note,
    )


def _a3(m: ModelView) -> Result:
    base = m.col("baseline_cosine")
    if m.depth < 2 or _missing(base.loc[m.depth - 1 :]):
        return NA, "needs finite baselines in the last two layers", ""
    gap = base[m.depth - 1] - base[m.depth]
    note = "" if m.depth == PAPER_DEPTH["bert"] else f"penultimate layer {m.depth - 1} vs last layer {m.depth}"
    evidence = (
        f"baseline layer {m.depth - 1}: {base[m.depth - 1]:.3f}, layer {m.depth}: {base[m.depth]:.3f} (gap {gap:+.3f})"
    )
    if m.training == "sentence-encoder" and gap > 0:
        evidence += (
            f"; layer {m.depth} is the one the model's sentence-embedding objective trains (training: "
            "sentence-encoder), so its lower anisotropy may be that objective's, not its pretraining's"
        )
    return (HOLDS if gap > m.threshold("A3 gap above") else FAILS), evidence, note


def _a4(m: ModelView) -> Result:
    value = m.col("self_similarity").get(0, np.nan)
    if not np.isfinite(value):
        return NA, "raw self-similarity at layer 0 missing", ""
    return (
        (HOLDS if abs(value - 1.0) <= m.threshold("A4 tolerance") else FAILS),
        f"raw self-similarity at layer 0: {value:.4f}",
        "",
    )


def _a5a(m: ModelView) -> Result:
    adj = m.col("adjusted_self_similarity")
    if m.depth < 2 or _missing(adj.reindex([1, m.depth])):
        return NA, "needs adjusted self-similarity at layer 1 and a distinct top layer", ""
    evidence = f"adjusted self-similarity layer 1: {adj[1]:.3f}, top layer {m.depth}: {adj[m.depth]:.3f}"
    return (HOLDS if adj[m.depth] < adj[1] else FAILS), evidence, ""


def _a5b(m: ModelView) -> Result:
    status, evidence, _ = _all_below(
        m.col("adjusted_self_similarity").reindex([m.depth]),
        m.threshold("A5b adjusted self-similarity below"),
        f"adjusted self-similarity at the top layer {m.depth}",
    )
    return status, evidence, "" if m.depth == PAPER_DEPTH["gpt2"] else "top layer stands for GPT-2's layer 12"


def _a6(m: ModelView) -> Result:
    means = _word_means(m)
    if means is None or len(means) < 5:
        return NA, "needs the per-word table (words.parquet) with at least 5 words", ""
    lowest = list(means.index[:5])
    hits = [w for w in lowest if w in A6_WORDS]
    evidence = (
        f"five lowest (mean over all layers, 0 included, as the author's code): {', '.join(lowest)}; "
        f"{len(hits)} of them in {{{', '.join(A6_WORDS)}}}"
    )
    return (HOLDS if len(hits) >= m.threshold("A6 words at least") else FAILS), evidence, ""


def _a7a(m: ModelView) -> Result:
    adj = m.col("adjusted_intra_sentence")
    if m.depth < 2 or _missing(adj.reindex([0, 1, m.depth])):
        return NA, "needs adjusted intra-sentence similarity at layers 0, 1 and a distinct top layer", ""
    note = "" if m.depth == PAPER_DEPTH["elmo"] else f"checked as layer 0 < layer 1 < top layer {m.depth}"
    evidence = (
        f"adjusted intra-sentence similarity layer 0: {adj[0]:.3f}, 1: {adj[1]:.3f}, {m.depth}: {adj[m.depth]:.3f}"
    )
    return (HOLDS if adj[0] < adj[1] < adj[m.depth] else FAILS), evidence, note


def _a7b(m: ModelView) -> Result:
    return _all_above(m.col("adjusted_intra_sentence"), 0.0, "adjusted intra-sentence similarity")


def _a7c(m: ModelView) -> Result:
    adj = m.col("adjusted_intra_sentence")
    lo, hi, note = m.span(2, 12)
    if lo > hi or _missing(adj):
        return NA, "needs adjusted intra-sentence similarity in every layer and at least 2 layers", note
    band, width = adj.loc[lo:hi], m.threshold("A7c band half-width")
    near_zero = bool((band.abs() <= width).all())
    layer0_largest = adj.idxmax() == 0
    evidence = (
        f"layers {lo}-{hi}: {band.min():+.3f} to {band.max():+.3f} "
        f"({'within' if near_zero else 'outside'} ±{width:g}); largest value {_extreme(adj, 'max')}"
    )
    return (HOLDS if near_zero and layer0_largest else FAILS), evidence, note


def _a8a(m: ModelView) -> Result:
    return _all_below(m.col("mev").loc[1:], m.threshold("A8a raw MEV below"), "raw MEV, layers ≥ 1")


def _a8b(m: ModelView) -> Result:
    mev = m.col("mev")
    lo, hi, note = m.span(2, 11)
    if lo > hi or _missing(mev.loc[lo:hi]):
        return NA, f"needs raw MEV in layers {lo}-{hi}", note
    mean = float(mev.loc[lo:hi].mean())
    low, high = m.threshold("A8b band low"), m.threshold("A8b band high")
    return (HOLDS if low <= mean <= high else FAILS), f"mean raw MEV over layers {lo}-{hi}: {mean:.3f}", note


def _a10(m: ModelView) -> Result:
    pdepth = PAPER_DEPTH[m.paper_model]
    if m.depth != pdepth:
        return (
            NA,
            (
                f"depth {m.depth} differs from the paper's {pdepth}: no layer-by-layer comparison "
                "(see the summary table for relative-depth values)"
            ),
            "",
        )
    gaps = []
    for quantity in QUANTITIES:
        run = m.col(quantity)
        for layer in range(pdepth + 1):
            ref = reference_value(m.paper_model, quantity, layer)
            if ref is not None and np.isfinite(run.get(layer, np.nan)):
                gaps.append((abs(run[layer] - ref[0]), quantity, layer))
    return gap_verdict(gaps, m.threshold("A10 tolerance"), "values", "no comparable values")


def _s1(m: ModelView) -> Result:
    return _all_above(
        m.col("baseline_cosine").loc[1:], m.threshold("S1 baseline cosine above"), "baseline cosine, layers ≥ 1"
    )


def _s2(m: ModelView) -> Result:
    return _all_above(
        m.col("self_similarity") - m.col("baseline_cosine"), 0.0, "self-similarity − baseline, all layers"
    )


def _s3(m: ModelView) -> Result:
    adj = m.col("adjusted_self_similarity")
    if m.depth < 2 or _missing(adj):
        return NA, "needs adjusted self-similarity in at least 3 layers", ""
    rho, limit = float(spearmanr(adj.index.to_numpy(), adj.to_numpy()).statistic), m.threshold("S3 rho at most")
    evidence = (
        f"Spearman ρ(layer, adjusted self-similarity) = {rho:+.2f} over layers 0-{m.depth} "
        f"(threshold {limit:g}); layer 0: {adj[0]:.3f} → layer {m.depth}: {adj[m.depth]:.3f}"
    )
    return (HOLDS if rho <= limit else FAILS), evidence, ""


def _s4(m: ModelView) -> Result:
    limit = m.threshold("S4 adjusted MEV below")
    status, evidence, note = _all_below(m.col("adjusted_mev").loc[1:], limit, "adjusted MEV, layers ≥ 1")
    raw, base = m.col("mev").loc[1:], m.col("baseline_mev").loc[1:]
    if status == NA or _missing(raw) or _missing(base):
        return status, evidence, note
    evidence += f"; raw MEV {_span(raw)} beside baseline MEV {_span(base)}"
    return status, evidence + sink_reading(m, limit), note


def _span(values: pd.Series, fmt: str = ".3f") -> str:
    """'0.100-0.300' (one value when all are equal) for evidence strings."""
    low, high = f"{values.min():{fmt}}", f"{values.max():{fmt}}"
    return low if low == high else f"{low}-{high}"


def _layer_runs(layers) -> str:
    """Layers as runs: '1-4, 7'."""
    layers, runs = sorted(map(int, layers)), []
    for layer in layers:
        if runs and layer == runs[-1][1] + 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def sink_reading(m: ModelView, limit: float) -> str:
    """S4's words on what decides it: '' unless, at some layer >= 1, the raw MEV is at least SINK_RAW_FACTOR times
    ``limit`` while the adjusted MEV is below it (the baseline decides the verdict there); then which layers, and
    whether attention-sink rows (the layer's massive activations at the first position) inflate that baseline."""
    raw, adjusted = m.col("mev").loc[1:], m.col("adjusted_mev").loc[1:]
    decided = raw[(raw >= SINK_RAW_FACTOR * limit) & (adjusted < limit)].index
    if decided.empty:
        return ""
    text = (
        f"; the baseline decides it at layers {_layer_runs(decided)}: raw MEV ≥ {SINK_RAW_FACTOR * limit:g} "
        f"({SINK_RAW_FACTOR:g}× the threshold) while adjusted MEV is below {limit:g}"
    )
    if "massive_first_position_share" not in m.table.columns:
        return text + "; attention-sink rows not measured (no massive-activation columns)"
    occurrences, first = m.col("massive_occurrences").reindex(decided), m.col("massive_first_position_share")
    sinks = [k for k in decided if occurrences[k] > 0 and first[k] >= SINK_FIRST_SHARE]
    if not sinks:
        return text + f"; no attention-sink rows there (massive activations {SINK_FIRST_SHARE:.0%}+ at first positions)"
    return text + (
        f"; attention-sink rows inflate the baseline at layers {_layer_runs(sinks)} (massive activations, "
        f"{_span(first.reindex(sinks), '.0%')} of them at a sentence's first position)"
    )


def _s5(m: ModelView) -> Result:
    means = _word_means(m)
    present = [w for w in S5_STOPWORDS if means is not None and w in means.index]
    if not present:
        return NA, f"none of {', '.join(S5_STOPWORDS)} is indexed (or no per-word table)", ""
    median = float(means.median())
    ranks = means.rank(pct=True)
    parts = [f"'{w}' {means[w]:.3f} (lowest {100 * ranks[w]:.0f}%)" for w in present]
    evidence = f"mean self-similarity over all layers: {'; '.join(parts)}; median word {median:.3f}"
    return (HOLDS if all(means[w] < median for w in present) else FAILS), evidence, ""


LAYER_CHECKS: dict[str, Callable[[ModelView], Result]] = {
    "A1a": _a1a,
    "A1b": _a1b,
    "A2": _a2,
    "A3": _a3,
    "A4": _a4,
    "A5a": _a5a,
    "A5b": _a5b,
    "A6": _a6,
    "A7a": _a7a,
    "A7b": _a7b,
    "A7c": _a7c,
    "A8a": _a8a,
    "A8b": _a8b,
    "A10": _a10,
    "S1": _s1,
    "S2": _s2,
    "S3": _s3,
    "S4": _s4,
    "S5": _s5,
}
