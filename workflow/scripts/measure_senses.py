"""Snakemake entry point: every layer of one model (the STS corpus and the WordNet usages) -> its sense tables."""

import json
from functools import partial
from pathlib import Path

from tqdm import tqdm

from contextuality.core.archive import unpacked
from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import SenseSettings, from_params
from contextuality.models.heads import output_head_or_reason
from contextuality.models.loading import ModelError
from contextuality.senses.job import SensePaths, measure_senses
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
inputs = snakemake.input
paths = SensePaths(**{name: [Path(path) for path in getattr(inputs, name)] if name in ("layers", "senses_layers")
                      else unpacked(inputs.model) if name == "model"
                      else Path(getattr(inputs, name)) for name in SensePaths.__dataclass_fields__})  # fmt: skip
with expected_errors(StoreError, ModelError):
    rows, words = measure_senses(
        paths,
        from_params(SenseSettings, snakemake.params.senses),
        seed=snakemake.params.seed,
        model=snakemake.wildcards.model,
        threads=snakemake.threads,
        head_loader=partial(
            output_head_or_reason,
            json.loads(paths.record.read_text()),
            paths.model,
            allow_pickle=snakemake.params.allow_pickle,
        ),
        progress=lambda layers: tqdm(layers, desc=f"senses {snakemake.wildcards.model}", unit="layer"),
    )
with atomic_path(snakemake.output.layers) as tmp:
    rows.to_csv(tmp, index=False)
with atomic_path(snakemake.output.words) as tmp:
    words.to_parquet(tmp, index=False)
