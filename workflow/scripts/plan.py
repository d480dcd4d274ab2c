"""Snakemake entry point: a model's tokenizer + the corpus -> its plan (tokens, units), occurrences and losses."""
from pathlib import Path

from contextuality.extraction.alignment import AlignmentError
from contextuality.extraction.plan import NothingToMeasureError, run_plan_job
from contextuality.core.runtime import expected_errors, setup_job_logging

setup_job_logging(snakemake.log[0])
with expected_errors(NothingToMeasureError, AlignmentError):
    run_plan_job(
        model_key=snakemake.wildcards.model,
        spec=dict(snakemake.params.spec),
        record_path=Path(snakemake.input.record),
        model_dir=Path(snakemake.input.model),
        sentences_path=Path(snakemake.input.sentences),
        words_path=Path(snakemake.input.words),
        word_index_path=Path(snakemake.input.word_index),
        out_tokens=Path(snakemake.output.tokens),
        out_units=Path(snakemake.output.units),
        out_occurrences=Path(snakemake.output.occurrences),
        out_losses=Path(snakemake.output.losses),
        policy=snakemake.params.policy,
        min_occurrences=snakemake.params.words["min_occurrences"],
        count=snakemake.params.words["count"],
    )
