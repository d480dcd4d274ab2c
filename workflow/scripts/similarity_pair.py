"""Snakemake entry point: two models' similarity samples -> their cross table (every layer of A against every
layer of B, every variant)."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.core.settings import SimilaritySettings, from_params
from contextuality.measure.similarity_table_job import run_similarity_pair, table_device
from contextuality.store.files import StoreError

with script_job(snakemake, StoreError) as log:
    run_similarity_pair(
        corpus=snakemake.wildcards.corpus,
        models=(snakemake.wildcards.model_a, snakemake.wildcards.model_b),
        samples=tuple(map(Path, snakemake.input.samples)),
        knn=tuple(map(Path, snakemake.input.knn)),
        rows_path=Path(snakemake.input.rows),
        settings=from_params(SimilaritySettings, snakemake.params.similarity),
        seed=snakemake.params.seed,
        memory_mb=snakemake.params.memory_mb,
        out_csv=Path(snakemake.output.pair),
        device=table_device(snakemake.resources.gpu, snakemake.threads, log),
    )
