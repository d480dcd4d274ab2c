"""Snakemake entry point: a corpus's word index and every model's plan -> the occurrences every model stores
(rows.parquet, with the seeded draw the samples take), and what each model loses to the join (rows.json)."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.measure.similarity_job import run_similarity_rows
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
models = snakemake.params.models
with expected_errors(StoreError):
    run_similarity_rows(
        Path(snakemake.input.word_index),
        dict(zip(models, map(Path, snakemake.input.units))),
        dict(zip(models, map(Path, snakemake.input.tokens))),
        snakemake.params.seed,
        Path(snakemake.output.rows),
        Path(snakemake.output.record),
    )
