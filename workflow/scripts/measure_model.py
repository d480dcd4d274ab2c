"""Snakemake entry point: a model's plan and weights -> every layer of one part measured on the job's device
(the per-layer files as one tar, and what the rows were made from)."""

from pathlib import Path

from contextuality.core.archive import unpacked
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import Settings
from contextuality.extraction.devices import DeviceError
from contextuality.extraction.extract import ExtractionError
from contextuality.measure.device.plan import DeviceMemoryError
from contextuality.measure.device_job import run_measure_model_job
from contextuality.measure.similarity.sample import SampleRequest
from contextuality.models.loading import ModelError
from contextuality.store.files import StoreError

log = setup_job_logging(snakemake.log[0])
# The params hold what changes the measured rows, the measures and the part's layers; the job reads its settings
# from the config, so what changes no number here (batches, token cap, shards, device, memory) reruns nothing.
run = Settings.from_config(snakemake.config)
with expected_errors(DeviceError, DeviceMemoryError, ModelError, ExtractionError, StoreError):
    # the similarity stage's sample of the part's layers, gathered where they are resident
    sample = None
    if snakemake.params.sample is not None:
        sample = SampleRequest.of(
            Path(snakemake.input.similarity_rows),
            snakemake.wildcards.model,
            snakemake.params.sample["pooling"],
            snakemake.params.sample["max_rows"],
            run.extraction.storage_dtype,
            Path(snakemake.output.sample),
        )
    run_measure_model_job(
        model_key=snakemake.wildcards.model,
        corpus=snakemake.wildcards.corpus,
        shard=run.shard(snakemake.wildcards.model),
        measure=run.metrics.measure,  # its params hold what changes the measures (not memory_mb, unused here)
        requested_device=run.metrics.device.device,
        memory_fraction=run.metrics.device.device_memory_fraction,
        job_memory_mb=snakemake.resources.mem_mb,  # what the scheduler gave it: the CPU backend plans its groups in it
        parts=run.metrics.device.device_parts,
        part=int(snakemake.wildcards.part),
        record_path=Path(snakemake.input.record),
        model_dir=unpacked(snakemake.input.model),
        tokens_path=Path(snakemake.input.tokens),
        units_path=Path(snakemake.input.units),
        occurrences_path=Path(snakemake.input.occurrences),
        out_tar=Path(snakemake.output.layers),
        out_record=Path(snakemake.output.record),
        threads=snakemake.threads,
        gpus=snakemake.resources.gpu,  # the GPU this job was given (0 or 1): the one device policy
        sample=sample,
        log=log,
    )
