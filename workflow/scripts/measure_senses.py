"""Snakemake entry point: one layer of one model (the STS layer and the WordNet usages' layer) -> its sense measures."""
import json
from functools import partial
from pathlib import Path

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import SenseSettings, from_params
from contextuality.models.heads import output_head_or_reason
from contextuality.models.loading import ModelError
from contextuality.senses.layer_job import SensePaths, measure_senses_layer
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
inputs = snakemake.input
paths = SensePaths(**{name: Path(getattr(inputs, name)) for name in SensePaths.__dataclass_fields__})
with expected_errors(StoreError, ModelError):
    rows, words = measure_senses_layer(
        paths, int(snakemake.wildcards.layer), from_params(SenseSettings, snakemake.params.senses),
        seed=snakemake.params.seed, model=snakemake.wildcards.model,
        head_loader=partial(output_head_or_reason, json.loads(paths.record.read_text()), paths.model,
                            allow_pickle=snakemake.params.allow_pickle),
        threads=snakemake.threads,
    )
with atomic_path(snakemake.output.rows) as tmp:
    rows.to_csv(tmp, index=False)
with atomic_path(snakemake.output.words) as tmp:
    words.to_parquet(tmp, index=False)
