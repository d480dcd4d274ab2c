"""Snakemake entry point: one shard of sentences through one model -> shard HDF5 + units table."""
import os

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")  # shared file systems (NFS, Lustre) lack locks

from pathlib import Path

from contextuality.extract import run_extraction_job
from contextuality.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
run_extraction_job(
    model_key=snakemake.wildcards.model,
    spec=dict(snakemake.params.spec),
    extraction={**snakemake.config["extraction"], **snakemake.params.extraction},
    record_path=Path(snakemake.input.record),
    model_dir=Path(snakemake.input.model),
    sentences_path=Path(snakemake.input.sentences),
    words_path=Path(snakemake.input.words),
    shard=int(snakemake.wildcards.shard),
    out_h5=Path(snakemake.output.shard),
    out_units=Path(snakemake.output.units),
    threads=snakemake.threads,
    seed=snakemake.config["seed"],  # provenance only: read from config so a new seed re-extracts nothing
)
