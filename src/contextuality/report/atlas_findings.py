"""The atlas's findings as text, written from a run's tables so that prose and numbers cannot drift.

``python -m contextuality.report.atlas_findings RESULTS/tables --findings docs/findings.md --readme README.md``
rewrites the block between ``<!-- atlas-findings:begin -->`` and ``<!-- atlas-findings:end -->`` in each file
named (``--check``: change nothing, exit 1 where a block differs from what the tables say). The findings page gets
the per-model table, the paper's claims per model, and the claims whose verdict depends on which model stands in
for one of the paper's models; the README gets one paragraph of the same facts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from contextuality.report.findings_run import FindingsError, markers, update_exit_status
from contextuality.report.findings_run import replace_block as replace_marked
from contextuality.report.tables import fmt, md_text, pipe_table

MARKER = "atlas-findings"
BEGIN, END = markers(MARKER)
PAPER_NAMES = {"bert": "BERT", "gpt2": "GPT-2", "elmo": "ELMo"}
MODEL_COLUMNS = (
    "model: kind, training",
    "anisotropy (max, depth)",
    "adj. self-sim. (min, depth)",
    "adj. intra-sent. (top)",
    "MEV (max)",
    "senses AUROC best (shape only)",
    "CKA adjacent",
    "closest model (CKA)",
)


def _at(value, depth) -> str:
    return f"{fmt(value)} ({fmt(depth, 2)})"


def model_table(atlas: pd.DataFrame) -> str:
    """One line per model: the atlas columns a reader compares first (depths are relative: 0 input, 1 last)."""
    rows = [
        (
            f"{md_text(row.label)}: {row.kind}, {row.training}",
            _at(row.anisotropy_max, row.anisotropy_max_depth),
            _at(row.self_similarity_adj_min, row.self_similarity_adj_min_depth),
            fmt(row.intra_sentence_adj_top),
            fmt(row.mev_max),
            f"{fmt(row.senses_auroc_best)} ({fmt(row.senses_auroc_shape)})",
            fmt(row.cka_adjacent_mean),
            f"{row.closest_model} ({fmt(row.closest_cka)})" if isinstance(row.closest_model, str) else "–",
        )
        for row in atlas.itertuples()
    ]
    return pipe_table(MODEL_COLUMNS, rows, "lrrrrrrl")


def claim_verdicts(claims: pd.DataFrame, models: Sequence[str]) -> pd.DataFrame:
    """The paper's claims (not the senses' W claims) as claim x model, each cell HOLDS, FAILS or '–' (not tested)."""
    paper = claims[~claims["claim"].astype(str).str.startswith("W")]
    table = paper.pivot_table(index="claim", columns="model", values="status", aggfunc="first").reindex(columns=models)
    return table.fillna("–")


def changed_verdicts(claims: pd.DataFrame) -> list[tuple[str, str, dict[str, str]]]:
    """Claims whose verdict differs between two stand-ins of one paper model: (paper model, claim, {model: verdict})."""
    changed = []
    stand_ins = claims[claims["stand_in"].astype(str) == "True"]
    for paper_model, group in stand_ins.groupby("paper_model", sort=True):
        verdicts = group.pivot_table(index="claim", columns="model", values="status", aggfunc="first")
        if verdicts.shape[1] < 2:
            continue
        for claim, row in verdicts.iterrows():
            tested = row.dropna()
            if len(tested) >= 2 and tested.nunique() > 1:
                changed.append((str(paper_model), str(claim), tested.to_dict()))
    return changed


def _statements(claims: pd.DataFrame) -> dict[str, str]:
    return claims.drop_duplicates("claim").set_index("claim")["statement"].astype(str).to_dict()


def findings_block(atlas: pd.DataFrame, claims: pd.DataFrame) -> str:
    """The findings page's atlas section: the model table, the claims per model, the verdicts that change."""
    models = list(atlas["model"])
    labels = dict(zip(atlas["model"], atlas["label"], strict=True))
    verdicts = claim_verdicts(claims, models)
    statements = _statements(claims)
    header = ["claim", *[md_text(labels[m]) for m in models]]
    claim_rows = [(f"{c}: {statements.get(c, '')}", *verdicts.loc[c]) for c in verdicts.index]
    changed = changed_verdicts(claims)
    lines = [
        f"{len(models)} models on the same word occurrences (relative depth: 0 the input layer, 1 the last; "
        "adjusted measures minus the exact baseline; CKA debiased, on the similarity tables' variant the atlas "
        "names). Written by `python -m contextuality.report.atlas_findings` from `results/tables/atlas.csv` and "
        "`claims.csv`.",
        "",
        "![The atlas](figures/atlas.png)",
        "",
        model_table(atlas),
        "",
        "The paper's claims on each model (`claims.csv`; – where a claim is not about that model):",
        "",
        pipe_table(header, claim_rows, "l" + "c" * len(models)),
        "",
    ]
    if not changed:
        lines.append("No claim changes verdict between two stand-ins of one of the paper's models.")
    for paper_model, claim, by_model in changed:
        said = ", ".join(f"{md_text(labels.get(m, m))} {v}" for m, v in by_model.items())
        lines.append(f"- **{claim}** ({PAPER_NAMES.get(paper_model, paper_model)}): {said}. {statements[claim]}")
    return "\n".join(lines)


def readme_block(atlas: pd.DataFrame, claims: pd.DataFrame) -> str:
    """One paragraph for the README: how many models, the range of anisotropy, the verdicts that change."""
    changed = changed_verdicts(claims)
    labels = dict(zip(atlas["model"], atlas["label"], strict=True))
    trained = atlas[atlas["training"] != "random"]
    if trained.empty:
        trained = atlas  # a run of controls only: their range, still named as controls below
    lowest = trained.loc[trained.self_similarity_adj_min.idxmin()]  # where a trained model is most context-specific
    sentence = (
        f"The atlas (`config/atlas.yaml`) puts {(atlas.training != 'random').sum()} trained models and "
        f"{(atlas.training == 'random').sum()} untrained controls on one page: peak anisotropy {fmt(trained.anisotropy_max.min(), 2)}-"
        f"{fmt(trained.anisotropy_max.max(), 2)}, adjusted self-similarity down to "
        f"{fmt(lowest.self_similarity_adj_min, 2)} ({md_text(lowest.label)}, relative depth "
        f"{fmt(lowest.self_similarity_adj_min_depth, 2)})."
    )
    by_paper: dict[str, list[str]] = {}
    for paper_model, claim, by_model in changed:
        said = " vs ".join(f"{labels.get(m, m)} {v}" for m, v in by_model.items())
        by_paper.setdefault(PAPER_NAMES.get(paper_model, paper_model), []).append(f"{claim} ({said})")
    if by_paper:
        sentence += " Claims whose verdict depends on the stand-in: " + "; ".join(
            f"for {name}, {', '.join(items)}" for name, items in by_paper.items()
        )
        sentence += "."
    else:
        sentence += " No claim's verdict depends on which stand-in is used."
    return md_text(sentence).replace("\\", "") + "\n\n![The atlas](docs/figures/atlas.png)"


def replace_block(text: str, block: str, where: str) -> str:
    """``text`` with the part between the atlas markers replaced by ``block``; both markers must be there once."""
    return replace_marked(text, block, where, MARKER)


def read_tables(tables: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """atlas.csv and claims.csv of a run, checked for the columns the findings read."""
    frames = []
    for name, needed in (
        ("atlas.csv", ("model", "label", "training", "anisotropy_max")),
        ("claims.csv", ("model", "claim", "status", "stand_in", "paper_model")),
    ):
        path = tables / name
        if not path.is_file():
            raise FindingsError(f"{path}: not there; run `snakemake atlas` (config/atlas.yaml) first")
        frame = pd.read_csv(path)
        missing = [c for c in needed if c not in frame.columns]
        if missing:
            raise FindingsError(
                f"{path}: lacks the columns {missing}; rebuild it with this version's `snakemake atlas`"
            )
        frames.append(frame)
    return frames[0], frames[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", type=Path, help="a run's results/tables folder")
    parser.add_argument("--findings", type=Path, help="the findings page to update (docs/findings.md)")
    parser.add_argument("--readme", type=Path, help="the README to update")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is stale")
    args = parser.parse_args(argv)

    def targets():
        atlas, claims = read_tables(args.tables)
        return [
            (args.findings, {MARKER: findings_block(atlas, claims)}),
            (args.readme, {MARKER: readme_block(atlas, claims)}),
        ]

    return update_exit_status("atlas_findings", args.tables, targets, args.check)


if __name__ == "__main__":
    sys.exit(main())
