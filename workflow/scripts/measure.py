"""Snakemake entry point: one model's layer files -> words/layers tables, PC embeddings, word lists."""
from pathlib import Path

import pandas as pd

from contextuality.analysis import measure_model
from contextuality.atomic import atomic_path
from contextuality.runtime import setup_job_logging
from contextuality.store import layer_files

log = setup_job_logging(snakemake.log[0])
metrics = snakemake.params.metrics
measure_model(
    layer_files(snakemake.input.layers),
    pd.read_parquet(snakemake.input.occurrences),
    Path(snakemake.output.words),
    Path(snakemake.output.layers_parquet),
    Path(snakemake.output.pcs),
    Path(snakemake.output.context_words),
    model=snakemake.wildcards.model,
    seed=snakemake.params.seed,
    intra_sentences=metrics["intra_sentences"],
    baseline_samples=metrics["baseline_samples"],
    self_similarity=metrics["self_similarity"],
    sampled_pairs=metrics["sampled_pairs"],
    mev_layer0=metrics["mev_layer0"],
    bootstrap_resamples=metrics["bootstrap_resamples"],
    top_k=metrics["top_k_words"],
    log=log,
)
with atomic_path(snakemake.output.layers) as tmp:
    pd.read_parquet(snakemake.output.layers_parquet).to_csv(tmp, index=False, float_format="%.6g")
