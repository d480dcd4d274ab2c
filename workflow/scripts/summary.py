"""Snakemake entry point: per-layer and per-word tables and Table 1 -> summary (vs the paper) and claims report."""

import json
from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.report.claims import claims_report
from contextuality.report.inert import from_inert_json
from contextuality.report.losses import losses_frame
from contextuality.report.senses import sense_claims, sense_claims_section, sensitivity
from contextuality.report.summary import summary_table

setup_job_logging(snakemake.log[0])
models = snakemake.params.models
layer_tables = {model: pd.read_parquet(path) for model, path in zip(models, snakemake.input.layers)}
word_tables = {model: pd.read_parquet(path) for model, path in zip(models, snakemake.input.words)}
losses = {model: json.loads(Path(path).read_text()) for model, path in zip(models, snakemake.input.losses)}
labels, sources = from_inert_json(snakemake.params.labels), from_inert_json(snakemake.params.sources)
paper_models = snakemake.params.paper_models
# Table 1's scores (claims A9a-d); absent when static.enabled is false
table1 = pd.read_csv(snakemake.input.table1[0]) if snakemake.input.table1 else None
summary_table(
    layer_tables,
    labels,
    paper_models,
    snakemake.output.summary_md,
    snakemake.output.summary_tex,
    sources=sources,
    losses=losses,
)
# The word-senses claims (W1-W4), when senses.enabled: their own section of claims.md and rows of claims.csv
sense_tables = {model: pd.read_csv(path) for model, path in zip(models, snakemake.input.senses)}
anisotropy = {
    model: table.set_index("layer")["baseline_cosine_exact" if "baseline_cosine_exact" in table else "baseline_cosine"]
    for model, table in layer_tables.items()
}
senses = sense_claims(sense_tables, anisotropy, labels)
# which verdicts move when one of our thresholds moves by half
moved = sensitivity(sense_tables, anisotropy, labels) if sense_tables else None
# a corpus other than STS: its record (one path), else no input
corpus_path = (
    snakemake.input.corpus if isinstance(snakemake.input.corpus, str) else next(iter(snakemake.input.corpus), None)
)
corpus = json.loads(Path(corpus_path).read_text()) if corpus_path else None
claims = claims_report(
    layer_tables,
    word_tables,
    labels,
    paper_models,
    snakemake.output.claims_md,
    sources=sources,
    losses=losses,
    table1=table1,
    extra_sections=sense_claims_section(senses, moved),
    corpus=corpus,
    trainings=snakemake.params.trainings,
)
claims = pd.concat([claims, senses], ignore_index=True) if len(senses) else claims
with atomic_path(snakemake.output.claims_csv) as tmp:
    claims.to_csv(tmp, index=False)
with atomic_path(snakemake.output.losses_csv) as tmp:
    losses_frame(losses, labels).to_csv(tmp, index=False)
