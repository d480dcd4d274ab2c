"""Snakemake entry point: a model's shard files -> one HDF5 file per layer + units.parquet."""
from pathlib import Path

from contextuality.runtime import setup_job_logging
from contextuality.store import gather

setup_job_logging(snakemake.log[0])
gather(
    [Path(path) for path in snakemake.input.shards],
    [Path(path) for path in snakemake.input.units],
    Path(snakemake.output.layers),
    snakemake.params.storage_dtype,
)
