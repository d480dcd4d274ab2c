"""Snakemake entry point: a model's tokenizer + the corpus -> its plan (tokens, units), occurrences and losses."""

from contextuality.core.runtime import job_files, script_job
from contextuality.core.settings import PlanSettings, from_params
from contextuality.extraction.alignment import AlignmentError
from contextuality.extraction.faithful import NotADecoderError
from contextuality.extraction.plan import NothingToMeasureError, run_plan_job
from contextuality.models.loading import ModelError

with script_job(snakemake, NothingToMeasureError, AlignmentError, ModelError, NotADecoderError):
    run_plan_job(
        model_key=snakemake.wildcards.model,
        settings=from_params(PlanSettings, snakemake.params.plan),
        **job_files(
            snakemake,
            inputs=("record", "model", "sentences", "words", "word_index"),
            outputs=("tokens", "units", "occurrences", "losses"),
        ),
    )
