"""Snakemake entry point: a model's similarity sample -> its within-model table (every pair of layers, every
variant) and its layers' k nearest neighbours."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.core.settings import SimilaritySettings, from_params
from contextuality.measure.similarity_table_job import run_similarity_model, table_device
from contextuality.store.files import StoreError

with script_job(snakemake, StoreError) as log:
    run_similarity_model(
        corpus=snakemake.wildcards.corpus,
        model=snakemake.wildcards.model,
        sample_path=Path(snakemake.input.sample),
        rows_path=Path(snakemake.input.rows),
        settings=from_params(SimilaritySettings, snakemake.params.similarity),
        seed=snakemake.params.seed,
        memory_mb=snakemake.params.memory_mb,
        out_csv=Path(snakemake.output.layers),
        out_knn=Path(snakemake.output.knn),
        device=table_device(snakemake.resources.gpu, snakemake.threads, log),
    )
