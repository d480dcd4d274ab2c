"""Snakemake entry point: one model's PC embeddings (every layer) -> benchmark scores (keyed by model key)."""

from contextuality.core.runtime import setup_job_logging
from contextuality.static.scoring import score_pc_layers, write_scores

setup_job_logging(snakemake.log[0])
write_scores(snakemake, score_pc_layers, list(snakemake.input.pcs), label=snakemake.wildcards.model)
