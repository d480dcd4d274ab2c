"""Snakemake entry point: a user-supplied static embedding -> benchmark scores."""

from contextuality.core.runtime import setup_job_logging
from contextuality.static.scoring import score_baseline_file, write_scores

setup_job_logging(snakemake.log[0])
write_scores(snakemake, score_baseline_file, snakemake.input.embedding, label=snakemake.wildcards.baseline)
