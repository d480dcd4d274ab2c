"""Snakemake entry point: one shard of a model's planned sentences -> shard HDF5 (every layer's vectors)."""

from pathlib import Path

from contextuality.core.diskspace import DiskSpaceError
from contextuality.core.runtime import expected_errors, job_files, setup_job_logging
from contextuality.core.settings import Settings
from contextuality.extraction.devices import DeviceError
from contextuality.extraction.extract import ExtractionError, run_extraction_job
from contextuality.extraction.finite import NonFiniteError
from contextuality.extraction.writer import DiskFullError
from contextuality.models.loading import ModelError

setup_job_logging(snakemake.log[0])
# The params hold what changes the stored vectors (a change re-extracts); how the job runs (batches, token cap,
# device, allow_pickle), the seed and the disk margin are read from the config: a change re-extracts nothing.
run = Settings.from_config(snakemake.config)
settings = run.shard(snakemake.wildcards.model)  # the manifest checks what the shard records against the params
with expected_errors(DiskSpaceError, DiskFullError, ModelError, DeviceError, ExtractionError, NonFiniteError):
    run_extraction_job(
        model_key=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        settings=settings,
        **job_files(snakemake, inputs=("record", "model", "tokens", "units")),
        shard=int(snakemake.wildcards.shard),
        out_h5=Path(snakemake.output.shard),
        threads=snakemake.threads,
        disk_factor=run.extraction.min_free_disk_factor,
        gpus=snakemake.resources.gpu,  # the GPU this job was given (0 or 1): the one device policy
        seed=run.seed,  # recorded for provenance only: a new seed re-extracts nothing
    )
