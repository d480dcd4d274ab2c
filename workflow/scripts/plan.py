"""Snakemake entry point: a model's tokenizer + the corpus -> its plan (tokens, units), occurrences and losses."""

from pathlib import Path

from contextuality.core.archive import unpacked
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import PlanSettings, from_params
from contextuality.extraction.alignment import AlignmentError
from contextuality.extraction.faithful import NotADecoderError
from contextuality.extraction.plan import NothingToMeasureError, run_plan_job
from contextuality.models.loading import ModelError

setup_job_logging(snakemake.log[0])
with expected_errors(NothingToMeasureError, AlignmentError, ModelError, NotADecoderError):
    run_plan_job(
        model_key=snakemake.wildcards.model,
        settings=from_params(PlanSettings, snakemake.params.plan),
        record_path=Path(snakemake.input.record),
        model_dir=unpacked(snakemake.input.model),
        sentences_path=Path(snakemake.input.sentences),
        words_path=Path(snakemake.input.words),
        word_index_path=Path(snakemake.input.word_index),
        out_tokens=Path(snakemake.output.tokens),
        out_units=Path(snakemake.output.units),
        out_occurrences=Path(snakemake.output.occurrences),
        out_losses=Path(snakemake.output.losses),
    )
