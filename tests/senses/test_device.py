"""The sense job on the device path (metrics.on_device: ``senses.device``) against the store path, on the smoke runs.

Torch's CPU backend runs the code a GPU runs. The job computes both corpora's layers itself, through extraction's
windows, batches, pooling and cast, so its rows are the store's values and its tables the store path's, byte for
byte; a job given less memory than it declared plans more groups (more forward passes) and the same tables.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from contextuality.core import layout
from contextuality.core.archive import unpacked
from contextuality.measure.device import plan as device_plan
from contextuality.workflow.schema import load_settings
from workflow_runs import DEVICE_SMOKE, smoke_config

pytestmark = pytest.mark.slow

MODELS = ("tiny-bert", "tiny-gpt2")


def sense_paths(model: str):
    """The device job's inputs in a finished smoke run (the working directory): what the rule gives it."""
    from contextuality.senses.job import SensePaths

    sts = {"corpus": "sts", "model": model}
    usages = {"corpus": layout.USAGES_CORPUS, "model": model}
    files = {
        "occurrences": layout.path(layout.OCCURRENCES, **sts), "units": layout.path(layout.UNITS, **sts),
        "tokens": layout.path(layout.TOKENS, **sts), "spacy_words": layout.path(layout.SPACY_WORDS, corpus="sts"),
        "inventory": layout.SENSE_INVENTORY, "diversity": layout.CONTEXT_DIVERSITY,
        "tagged_forms": layout.SENSE_TAGGED_FORMS, "usages": layout.SENSE_USAGES, "pairs": layout.SENSE_PAIRS,
        "senses_units": layout.path(layout.UNITS, **usages), "senses_tokens": layout.path(layout.TOKENS, **usages),
        "senses_spacy_words": layout.path(layout.SPACY_WORDS, corpus=layout.USAGES_CORPUS),
        "record": layout.path(layout.MODEL_RECORD, model=model),
    }  # fmt: skip
    return SensePaths(model=unpacked(layout.path(layout.MODEL_FOLDER, model=model)),
                      **{name: Path(path) for name, path in files.items()})  # fmt: skip


def test_the_device_paths_sense_tables_are_the_store_paths_byte_for_byte(smoke_run, device_run):
    """The device run wrote no store of the usages' corpus, planned one group (its declared mem_mb holds every layer
    of both corpora at once), and its sense tables are the store run's, byte for byte."""
    for model in MODELS:
        assert (smoke_run / layout.path(layout.MANIFEST, corpus=layout.USAGES_CORPUS, model=model)).is_file()
        assert not (device_run / layout.path(layout.MANIFEST, corpus=layout.USAGES_CORPUS, model=model)).exists()
        for table in (layout.SENSE_LAYERS, layout.SENSE_WORDS):
            expected = (smoke_run / layout.path(table, corpus="sts", model=model)).read_bytes()
            assert (device_run / layout.path(table, corpus="sts", model=model)).read_bytes() == expected, (model, table)
        log = (device_run / layout.path(layout.MEASURE_SENSES_LOG, corpus="sts", model=model)).read_text()
        assert "1 group(s) of" in log and "(torch CPU backend)" in log


def test_a_sense_job_given_little_memory_plans_several_groups_and_the_same_tables(smoke_run, monkeypatch):
    """In this process, on the store run's plans and model: a job given room for one layer of both corpora beside
    what it holds (rounded up to a whole MB) plans several groups, a forward pass per corpus each, and gives the
    store path's tables; given less than what it holds, it is refused naming its mem_mb and the way to raise it."""
    from contextuality.extraction.plan import read_plan
    from contextuality.measure.device_job import job_reserve
    from contextuality.models.heads import output_head_or_reason
    from contextuality.senses import memory
    from contextuality.senses.device import MODELS_LOADED, measure_senses_on_device
    from contextuality.senses.job import SenseJob

    settings = load_settings(json.loads(json.dumps(smoke_config(**DEVICE_SMOKE))))
    monkeypatch.chdir(smoke_run)
    for model in MODELS:
        paths, shard = sense_paths(model), settings.shard(model)
        record = json.loads(paths.record.read_text())
        plans = read_plan(paths.tokens, paths.units), read_plan(paths.senses_tokens, paths.senses_units)
        rows, d = sum(len(plan.units) for plan in plans), record["dim"]
        layer_bytes = rows * d * 4  # float32 storage in the smoke config
        most = 1 + device_plan.MB // layer_bytes  # layers a group may hold: one, and what a whole MB of slack holds
        assert most < record["n_layers"]
        beside = device_plan.held_bytes(record["weights_bytes"], MODELS_LOADED) + memory.work_bytes(rows, d)
        beside += job_reserve(list(plans), shard, d=d, n_layers=record["n_layers"], on_cuda=False, layer_measures=False)
        job_memory_mb = -(-(beside + layer_bytes) // device_plan.MB)
        job = SenseJob(
            paths, settings.senses, settings.seed, model, partial(output_head_or_reason, record, paths.model)
        )
        table, words, figures = measure_senses_on_device(
            job, shard=shard, device="cpu", memory_fraction=0.9, job_memory_mb=job_memory_mb
        )
        assert len(figures["groups"]) > 1 and max(map(len, figures["groups"])) <= most, figures["groups"]
        assert [layer for group in figures["groups"] for layer in group] == list(range(record["n_layers"]))
        expected = (smoke_run / layout.path(layout.SENSE_LAYERS, corpus="sts", model=model)).read_text()
        assert table.to_csv(index=False) == expected
        stored = pd.read_parquet(smoke_run / layout.path(layout.SENSE_WORDS, corpus="sts", model=model))
        pd.testing.assert_frame_equal(words, stored, check_exact=True)
        with pytest.raises(device_plan.DeviceMemoryError, match=r"mem_mb.*--set-resources"):
            measure_senses_on_device(
                SenseJob(paths, settings.senses, settings.seed, model), shard=shard, device="cpu",
                memory_fraction=0.9, job_memory_mb=beside // device_plan.MB - 1,
            )  # fmt: skip
