"""Snakemake entry point: every layer of one model (the STS corpus and the WordNet usages) -> its sense tables; the
layers read from the store, or on the device path (params ``on_device``) computed by the job's forward passes."""

import json
from functools import partial
from pathlib import Path

from tqdm import tqdm

from contextuality.core.archive import unpacked
from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import SenseSettings, Settings, from_params
from contextuality.extraction.devices import DeviceError
from contextuality.extraction.extract import ExtractionError
from contextuality.measure.device.plan import DeviceMemoryError
from contextuality.models.heads import output_head_or_reason
from contextuality.models.loading import ModelError
from contextuality.senses.device import run_measure_senses_on_device_job
from contextuality.senses.job import SenseJob, SensePaths, measure_senses
from contextuality.store.files import StoreError

log = setup_job_logging(snakemake.log[0])
inputs = snakemake.input
LISTS = ("layers", "senses_layers")
# the store's files are inputs on the store path only
paths = SensePaths(**{name: [Path(path) for path in getattr(inputs, name)] if name in LISTS
                      else unpacked(inputs.model) if name == "model"
                      else Path(getattr(inputs, name)) for name in SensePaths.__dataclass_fields__
                      if hasattr(inputs, name)})  # fmt: skip
settings = from_params(SenseSettings, snakemake.params.senses)
head_loader = partial(
    output_head_or_reason, json.loads(paths.record.read_text()), paths.model, allow_pickle=snakemake.params.allow_pickle
)
job = SenseJob(
    paths,
    settings,
    snakemake.params.seed,
    snakemake.wildcards.model,
    head_loader=head_loader,
    threads=snakemake.threads,
)
with expected_errors(StoreError, ModelError, DeviceError, DeviceMemoryError, ExtractionError):
    if getattr(snakemake.params, "on_device", None) is not None:
        # how the job runs (its batches, device and memory share) is read from the config: a change reruns nothing
        run = Settings.from_config(snakemake.config)
        rows, words, _ = run_measure_senses_on_device_job(
            job,
            requested_device=run.metrics.device.device,
            gpus=snakemake.resources.gpu,  # the GPU this job was given (0 or 1): the one device policy
            shard=run.shard(snakemake.wildcards.model),
            memory_fraction=run.metrics.device.device_memory_fraction,
            job_memory_mb=snakemake.resources.mem_mb,  # what the scheduler gave it: its groups are planned in it
            log=log,
        )
    else:
        rows, words = measure_senses(
            job, progress=lambda layers: tqdm(layers, desc=f"senses {snakemake.wildcards.model}", unit="layer")
        )
with atomic_path(snakemake.output.layers) as tmp:
    rows.to_csv(tmp, index=False)
with atomic_path(snakemake.output.words) as tmp:
    words.to_parquet(tmp, index=False)
