"""Snakemake entry point: the checked WordNet 3.0 files -> its definitions and example sentences as a table."""

from pathlib import Path

from contextuality.core.runtime import setup_job_logging
from contextuality.senses.lexicon.glosses import write_glosses

setup_job_logging(snakemake.log[0])
write_glosses(Path(snakemake.input.record).parent, Path(snakemake.output.table))
