"""Guarantee: a job reruns when a value its output depends on changes, and only then.

Each rule's params hold exactly what changes its output (``contextuality.core.settings``), in a fixed
order. Dry runs of the finished smoke run with an edited config show which jobs Snakemake would rerun.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import job_counts, run_snakemake, write_config
from workflow_runs import failure, smoke_config

LAYERS = {"tiny-bert": 3, "tiny-gpt2": 4}  # the smoke models' layers, input layer included


def _planned(workdir, tmp_path, config: dict) -> dict[str, int]:
    result = run_snakemake(workdir, "-n", "--cores", "1", configfile=write_config(tmp_path / "edited.yaml", config))
    assert result.returncode == 0, failure(result)
    return {rule: count for rule, count in job_counts(result.stdout).items() if rule != "total"}


@pytest.mark.slow
def test_the_finished_smoke_run_plans_nothing(smoke_run, tmp_path):
    assert _planned(smoke_run, tmp_path, smoke_config()) == {}


@pytest.mark.slow
def test_reordered_metrics_keys_and_top_k_words_rerun_no_layer_measurement(smoke_run, tmp_path):
    """The metrics section was passed whole: the same keys in another order, or a new top_k_words (which only
    the combining step reads), reran every layer of every model."""
    config = smoke_config()
    metrics = dict(reversed(list({**config["metrics"], "postprocess": ["abtt", "standardize", "none"]}.items())))
    config["metrics"] = {**metrics, "top_k_words": 5}
    planned = _planned(smoke_run, tmp_path, config)
    assert "measure_layer" not in planned, planned
    assert planned["combine_layers"] == 2, planned  # the context-specific words, and what is drawn from them


@pytest.mark.slow
def test_a_new_label_redraws_the_reports_only(smoke_run, tmp_path):
    """A model's label, or the paper model it stands for, is no job's input but the reporting rules'."""
    config = smoke_config()
    config["models"]["tiny-gpt2"]["label"] = "renamed GPT-2"
    config["models"]["tiny-bert"]["label"] = "a renamed tiny BERT"
    config["models"]["tiny-gpt2"]["stands_for"] = None
    planned = _planned(smoke_run, tmp_path, config)
    reports = {"figures", "model_figures", "senses_figures", "summary", "table1", "report_pages", "model_pages",
               "similarity_figures", "atlas", "all"}  # fmt: skip
    assert set(planned) == reports, planned
    assert planned["figures"] == planned["summary"] == planned["table1"] == 1, planned


@pytest.mark.slow
def test_a_measurement_setting_reruns_every_layer_and_nothing_upstream(smoke_run, tmp_path):
    config = copy.deepcopy(smoke_config())
    config["metrics"]["bootstrap_resamples"] = 50
    planned = _planned(smoke_run, tmp_path, config)
    assert planned.get("measure_layer") == sum(LAYERS.values()), planned
    assert not {"extract", "plan", "materialise_model", "words", "corpus"} & set(planned), planned


@pytest.mark.slow
def test_a_pooling_change_re_extracts_that_model_only(smoke_run, tmp_path):
    config = smoke_config()
    config["models"]["tiny-gpt2"]["pooling"] = "mean"
    planned = _planned(smoke_run, tmp_path, config)
    # its 4 shards of STS and 4 of the senses' usages (one extract rule over both corpora)
    assert planned["extract"] == 8 and planned["measure_layer"] == LAYERS["tiny-gpt2"], planned
    assert not {"materialise_model", "download_model", "plan", "words"} & set(planned), planned
    assert yaml.safe_dump(config)  # the edited config is a valid one


@pytest.mark.slow
def test_settings_that_do_not_change_the_vectors_re_extract_nothing(smoke_run, tmp_path):
    """max_batch_tokens, device and batch_size say how a shard job runs, not what it stores (lowering
    max_batch_tokens after one shard ran out of memory re-extracted every finished shard)."""
    config = copy.deepcopy(smoke_config())
    config["extraction"] |= {"max_batch_tokens": 64, "device": "auto"}
    assert _planned(smoke_run, tmp_path, config) == {}


@pytest.mark.slow
def test_a_batch_size_re_extracts_the_shards_it_cuts_and_no_single_shard(smoke_run, tmp_path):
    """Shards are cut between windows of 4 x batch_size sentences, so a new batch size re-extracts a model's shards
    (tiny-gpt2's 4, of the corpus and of the usages: 8 jobs of rule extract); tiny-bert's one shard holds every sentence whatever it is."""
    config = copy.deepcopy(smoke_config())
    config["extraction"]["batch_size"] = 5
    planned = _planned(smoke_run, tmp_path, config)
    assert planned.get("extract") == 8, planned
    assert not {"materialise_model", "download_model", "plan", "words"} & set(planned), planned


def test_the_batches_are_a_shards_param_only_where_they_change_it():
    """batch_size cuts several shards (windows of 4 x batch_size sentences) and steers a stateful model's state,
    which flows from batch to batch; elsewhere neither it nor the token cap, device or allow_pickle is a param."""
    from contextuality.core.settings import batch_params, stored_params
    from contextuality.workflow.schema import load_settings

    settings = load_settings({"models": {
        "one": {"source": "random", "architecture": "bert", "n_shards": 1},
        "four": {"source": "random", "architecture": "gpt2", "n_shards": 4, "batch_size": 8},
        "elmo": {"source": "elmo", "options": "o.json", "weights": "w.hdf5", "stateful": True, "n_shards": 1,
                 "batch_size": 1},
    }, "extraction": {"max_batch_tokens": 512}})  # fmt: skip
    assert batch_params(settings.models["one"]) is None
    assert batch_params(settings.models["four"]) == {"window": 32}
    assert batch_params(settings.models["elmo"]) == {"batch_size": 1, "max_batch_tokens": 512}
    stored = stored_params(settings.shard("four"))
    assert not {"batch_size", "max_batch_tokens", "device", "allow_pickle"} & set(stored) and "pooling" in stored


def test_every_settings_object_is_built_by_keyword():
    """Settings.shard and Settings.plan built their 12- and 6-field objects by position: a field added or moved
    in the class would have shifted every value after it without an error."""
    import dataclasses
    import inspect

    from contextuality.core import settings

    classes = [cls for _, cls in inspect.getmembers(settings, inspect.isclass)
               if dataclasses.is_dataclass(cls) and cls.__module__ == settings.__name__]  # fmt: skip
    assert len(classes) >= 15
    for cls in classes:
        with pytest.raises(TypeError):
            cls(*[None] * len(dataclasses.fields(cls)))


def test_which_shard_settings_change_the_stored_vectors_is_said_once():
    """ShardSettings called itself what the stored vectors depend on, while HOW_IT_RAN, a list of its own, named
    four of its fields that do not: the fields are marked now, and the data contract lists the same two sets."""
    import dataclasses
    import re

    from conftest import PROJECT
    from contextuality.core.settings import HOW_IT_RAN, ShardSettings, stored_params
    from contextuality.workflow.schema import load_settings

    fields = [field.name for field in dataclasses.fields(ShardSettings)]
    stored = [name for name in fields if name not in HOW_IT_RAN]
    assert set(HOW_IT_RAN) < set(fields)
    shard = load_settings({"models": {"m": {"source": "random", "architecture": "bert"}}}).shard("m")
    assert list(stored_params(shard)) == stored
    contract = (PROJECT / "docs" / "data-contract.md").read_text()
    listed = contract[contract.index("and the shard settings") : contract.index("which say how a job ran")]
    kept, left_out = listed.split("(not ")
    assert re.findall(r"`(\w+)`", kept) == stored and sorted(re.findall(r"`(\w+)`", left_out)) == list(HOW_IT_RAN)
