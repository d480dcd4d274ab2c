"""Snakemake entry point: one shard of a model's planned sentences -> shard HDF5 (every layer's vectors)."""
from pathlib import Path

from contextuality.core.diskspace import DiskSpaceError
from contextuality.extraction.extract import run_extraction_job
from contextuality.extraction.writer import DiskFullError
from contextuality.core.runtime import expected_errors, setup_job_logging

setup_job_logging(snakemake.log[0])
with expected_errors(DiskSpaceError, DiskFullError):
    run_extraction_job(
        model_key=snakemake.wildcards.model,
        spec=dict(snakemake.params.spec),
        extraction={**snakemake.config["extraction"], **snakemake.params.extraction},
        record_path=Path(snakemake.input.record),
        model_dir=Path(snakemake.input.model),
        tokens_path=Path(snakemake.input.tokens),
        units_path=Path(snakemake.input.units),
        shard=int(snakemake.wildcards.shard),
        out_h5=Path(snakemake.output.shard),
        threads=snakemake.threads,
        gpus=snakemake.resources.gpu,  # the GPU this job was given (0 or 1): the one device policy
        seed=snakemake.config["seed"],  # provenance only: read from config so a new seed re-extracts nothing
    )
