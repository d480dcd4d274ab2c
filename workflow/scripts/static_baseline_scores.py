"""Snakemake entry point: a user-supplied static embedding -> benchmark scores."""

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.static.scoring import score_baseline_file, shared_vocabulary

setup_job_logging(snakemake.log[0])
scores = score_baseline_file(
    snakemake.input.embedding,
    shared_vocabulary(snakemake.input.word_index),
    snakemake.input.benchmarks,
    label=snakemake.wildcards.baseline,
    seed=snakemake.params.seed,
)
with atomic_path(snakemake.output.scores) as tmp:
    scores.to_csv(tmp, index=False)
