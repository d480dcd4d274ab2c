"""Snakemake entry point: a model's rows of the similarity sample, every layer, from the store (each layer file
read once) or joined from the device parts that measure_model gathered."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.measure.similarity_job import run_similarity_sample_from_parts, run_similarity_sample_from_store
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
model, out = snakemake.wildcards.model, Path(snakemake.output.sample)
with expected_errors(StoreError):
    if "parts" in snakemake.input.keys():
        run_similarity_sample_from_parts(
            model=model,
            rows_path=Path(snakemake.input.rows),
            part_paths=list(map(Path, snakemake.input.parts)),
            out=out,
        )
    else:
        run_similarity_sample_from_store(
            model=model,
            rows_path=Path(snakemake.input.rows),
            manifest_path=Path(snakemake.input.manifest),
            layer_paths=list(map(Path, snakemake.input.layers)),
            pooling=snakemake.params.pooling,
            max_rows=snakemake.params.max_rows,
            out=out,
        )
