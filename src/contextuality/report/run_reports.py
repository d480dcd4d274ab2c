"""The run's reports beside the paper (the summary rule's job): summary.md/.tex, claims.md/.csv with the word-senses
claims, and losses.csv, from every model's tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.report.claims import claims_report
from contextuality.report.losses import losses_frame
from contextuality.report.senses import sense_claims, sense_claims_section, sensitivity
from contextuality.report.summary import summary_table


@dataclass(frozen=True)
class RunTables:
    """What the reports read of a run, by model key (``words`` and ``senses`` may leave models out)."""

    layers: dict[str, pd.DataFrame]
    words: dict[str, pd.DataFrame] | None = None
    losses: dict[str, dict] = field(default_factory=dict)
    senses: dict[str, pd.DataFrame] = field(default_factory=dict)  # when senses.enabled: each model's senses/layers
    table1: pd.DataFrame | None = None  # Table 1's scores (claims A9a-d); None when static.enabled is false
    corpus: dict | None = None  # a corpus other than STS: its record


def read_run_tables(
    models: Sequence[str],
    layers: Sequence[str | Path],
    words: Sequence[str | Path],
    losses: Sequence[str | Path],
    senses: Sequence[str | Path] = (),
    table1: Sequence[str | Path] = (),
    corpus: str | Path | Sequence[str | Path] = (),
) -> RunTables:
    """Each model's files (in the order of ``models``) read: layers.parquet, words.parquet, losses.json and, where
    given, senses/layers.csv; Table 1's CSV and the corpus record where there is one (an empty list where not)."""
    corpus_path = corpus if isinstance(corpus, (str, Path)) else next(iter(corpus), None)
    return RunTables(
        layers={model: pd.read_parquet(path) for model, path in zip(models, layers)},
        words={model: pd.read_parquet(path) for model, path in zip(models, words)},
        losses={model: json.loads(Path(path).read_text()) for model, path in zip(models, losses)},
        senses={model: pd.read_csv(path) for model, path in zip(models, senses)},
        table1=pd.read_csv(table1[0]) if table1 else None,
        corpus=json.loads(Path(corpus_path).read_text()) if corpus_path else None,
    )


def write_run_reports(
    run: RunTables,
    labels: dict[str, str],
    paper_models: dict[str, str | None],
    outputs,
    *,
    sources: dict[str, dict] | None = None,
    trainings: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Write the reports to ``outputs`` (the summary rule's: ``summary_md``, ``summary_tex``, ``claims_md``,
    ``claims_csv``, ``losses_csv``); returns the claims table as written to claims.csv."""
    summary_table(
        run.layers, labels, paper_models, outputs.summary_md, outputs.summary_tex, sources=sources, losses=run.losses
    )
    # the word-senses claims (W1-W4): their own section of claims.md and rows of claims.csv
    anisotropy = {
        model: table.set_index("layer")[
            "baseline_cosine_exact" if "baseline_cosine_exact" in table else "baseline_cosine"
        ]
        for model, table in run.layers.items()
    }
    senses = sense_claims(run.senses, anisotropy, labels)
    moved = (
        sensitivity(run.senses, anisotropy, labels) if run.senses else None
    )  # verdicts a threshold moved by half moves
    claims = claims_report(
        run.layers,
        run.words,
        labels,
        paper_models,
        outputs.claims_md,
        sources=sources,
        losses=run.losses,
        table1=run.table1,
        extra_sections=sense_claims_section(senses, moved),
        corpus=run.corpus,
        trainings=trainings,
    )
    claims = pd.concat([claims, senses], ignore_index=True) if len(senses) else claims
    with atomic_path(outputs.claims_csv) as tmp:
        claims.to_csv(tmp, index=False)
    with atomic_path(outputs.losses_csv) as tmp:
        losses_frame(run.losses, labels).to_csv(tmp, index=False)
    return claims
