"""Snakemake entry point: a model's shard files + its plan's units -> its manifest (the vectors stay in the shards)."""
from pathlib import Path

from contextuality.core.runtime import setup_job_logging
from contextuality.store.views import write_manifest

setup_job_logging(snakemake.log[0])
write_manifest(
    [Path(path) for path in snakemake.input.shards],
    Path(snakemake.input.units),
    Path(snakemake.output.manifest),
    model=snakemake.wildcards.model,
)
