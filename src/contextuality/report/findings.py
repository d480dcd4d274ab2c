"""The findings as text, written from a run's tables so that prose and numbers cannot drift.

``python -m contextuality.report.findings RESULTS --findings docs/findings.md --readme README.md [--check]``
rewrites, from the run under ``RESULTS`` (a results folder), the blocks between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``: ``findings-paper`` (the paper's four questions and Table 1, ``report.findings_paper``) and
``findings-senses`` (the word senses, ``report.findings_senses``) in the findings page, ``findings-readme`` (the
README's bullets) in the README. ``--check`` changes nothing and exits 1 where a block differs from what the tables
say. The atlas's block is ``report.atlas_findings``'s.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from contextuality.report.findings_paper import paper_block, rogue_dimensions
from contextuality.report.findings_run import Model, RunTables, update_exit_status
from contextuality.report.findings_senses import (
    WEAK_GAIN_OVER_SHAPE,
    best_layer,
    each,
    measured,
    senses_block,
    verdict_word,
)
from contextuality.report.tables import fmt, fmt_in_layers, fmt_span

PAPER, SENSES, README = "findings-paper", "findings-senses", "findings-readme"


def _stand_ins(run: RunTables) -> str:
    names = {"bert": "BERT", "gpt2": "GPT-2", "elmo": "ELMo"}
    parts = [f"{m.label} stands in for {names.get(m.paper_model, m.paper_model)}" for m in run.models if m.paper_model]
    return " and ".join(parts) if parts else "The run's models are " + ", ".join(m.label for m in run.models)


def _above_input(m: Model) -> tuple[int, int]:
    """How many contextual layers have a higher mean cosine between random words than the input layer, of how many."""
    cosine = m.curve("baseline_cosine").dropna()
    return int((cosine.iloc[1:] > cosine.iloc[0]).sum()), len(cosine) - 1


def _cone(m: Model) -> str:
    cosine = m.curve("baseline_cosine").dropna()
    above, layers = _above_input(m)
    return (
        f"{m.label}'s mean cosine between random words goes from {fmt(cosine.iloc[0], 2)} at layer 0 to "
        f"{fmt_span(cosine.iloc[1:].min(), cosine.iloc[1:].max())} in {fmt_in_layers(cosine.index[1:])}"
        + ("" if above == layers else f", above layer 0 in {above} of them")
    )


def _context_specific(run: RunTables) -> str:
    def lowest(m: Model) -> str:
        adjusted = m.curve("adjusted_self_similarity").dropna()
        return f"{fmt(adjusted.min(), 2)} in {m.label}'s layer {int(adjusted.idxmin())}"

    starts = " and ".join(fmt(m.curve("adjusted_self_similarity").dropna().iloc[0], 2) for m in run.models)
    more = all(run.verdict(m, "S3") == "HOLDS" for m in run.models)
    stopwords = all(run.verdict(m, "S5") == "HOLDS" for m in run.models)
    return (
        f"- **Context-specificity**: upper layers are {'more' if more else 'not in every model more'} context-specific "
        f"(adjusted self-similarity from {starts} at the input to {' and '.join(lowest(m) for m in run.models)})"
        + (", function words most." if stopwords else "; the stopwords are not the most context-specific words.")
    )


def _geometry(run: RunTables) -> str | None:
    carried = [text for m in run.models if (text := rogue_dimensions(m))]
    abtt = [
        m.postprocess[m.postprocess["postprocess"] == "abtt"]["baseline_cosine"]
        for m in run.models
        if m.postprocess is not None
    ]
    if not carried or not abtt:
        return None
    low, high = min(a.min() for a in abtt), max(a.max() for a in abtt)
    return (
        f"- **Geometry**: a few dimensions are the anisotropy ({carried[-1]}); after all-but-the-top (the mean and the "
        f"top d/100 principal components removed) it is {fmt_span(low, high)} in every layer of every model."
    )


def _senses(run: RunTables) -> str | None:
    models = [m for m in run.models if best_layer(m) is not None]
    if not models:
        return None
    auroc = each(models, lambda m: fmt(measured(m, "auroc_same_sense")["value"]))
    shape = " and ".join(fmt(measured(m, "auroc_shape")["value"]) for m in models)
    clusters = verdict_word(run.verdict(models[0], "W3b"), "detected", "not detected", "not testable")
    gain = max(measured(m, "auroc_cosine_shape")["value"] - measured(m, "auroc_shape")["value"] for m in models)
    return (
        f"- **Word senses** are told apart {'only weakly' if gain < WEAK_GAIN_OVER_SHAPE else 'beyond shape'}: "
        f"the best layer's AUROC for same- against different-sense pairs is {auroc}, against "
        f"{shape} from the sentences' shape alone (W3a {verdict_word(run.verdict(models[0], 'W3a'))}); sense clusters "
        f"without labels are {clusters} (W3b)."
    )


def readme_block(run: RunTables) -> str:
    """The README's "What the default run found": who stands in for whom, and one bullet per question."""
    intra = each(
        run.models,
        lambda m: fmt_span(m.curve("adjusted_intra_sentence").min(), m.curve("adjusted_intra_sentence").max()),
    )
    # "more" only where every contextual layer of every model is above its input layer, not on average
    anisotropic = all(above == layers for above, layers in map(_above_input, run.models))
    lines = [
        f"{_stand_ins(run)}; the numbers are in `results/tables/claims.md`, the reading in "
        "[docs/findings.md](docs/findings.md).",
        "",
        "![Figure 1: anisotropy](docs/figures/anisotropy.png)",
        "",
        f"- **Anisotropy**: contextual layers are {'more' if anisotropic else 'not all more'} anisotropic than the input "
        f"layer ({'; '.join(_cone(m) for m in run.models)}).",
        _context_specific(run),
        f"- **Intra-sentence similarity** (adjusted): {intra}.",
        _geometry(run),
        _senses(run),
    ]
    return "\n".join(line for line in lines if line is not None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a finished run's results folder")
    parser.add_argument("--corpus", default="sts", help="the corpus the findings read (results/metrics/CORPUS)")
    parser.add_argument("--findings", type=Path, help="the findings page to update (docs/findings.md)")
    parser.add_argument("--readme", type=Path, help="the README to update")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is stale")
    args = parser.parse_args(argv)

    def targets():
        run = RunTables.load(args.results, args.corpus)
        blocks = {PAPER: paper_block(run), SENSES: senses_block(run, args.results / "senses")}
        return [(args.findings, blocks), (args.readme, {README: readme_block(run)})]

    return update_exit_status("findings", args.results, targets, args.check)


if __name__ == "__main__":
    sys.exit(main())
