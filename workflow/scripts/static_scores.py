"""Snakemake entry point: one model's PC embeddings (every layer) -> benchmark scores (keyed by model key)."""

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.static.scoring import score_pc_layers, shared_vocabulary

setup_job_logging(snakemake.log[0])
scores = score_pc_layers(
    list(snakemake.input.pcs),
    shared_vocabulary(snakemake.input.word_index),
    snakemake.input.benchmarks,
    label=snakemake.wildcards.model,
    seed=snakemake.params.seed,
)
with atomic_path(snakemake.output.scores) as tmp:
    scores.to_csv(tmp, index=False)
