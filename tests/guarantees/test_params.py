"""Guarantee: a job reruns when a value its output depends on changes, and only then.

Each rule's params hold exactly what changes its output (``contextuality.core.settings``), in a fixed
order. Dry runs of the finished smoke run with an edited config show which jobs Snakemake would rerun.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import job_counts, run_snakemake, write_config
from workflow_runs import audited_smoke_run, failure, smoke_config

LAYERS = {"tiny-bert": 3, "tiny-gpt2": 4}  # the smoke models' layers, input layer included


def _planned(tmp_path_factory, tmp_path, config: dict) -> dict[str, int]:
    workdir = audited_smoke_run(tmp_path_factory)
    result = run_snakemake(workdir, "-n", "--cores", "1", configfile=write_config(tmp_path / "edited.yaml", config))
    assert result.returncode == 0, failure(result)
    return {rule: count for rule, count in job_counts(result.stdout).items() if rule != "total"}


@pytest.mark.slow
def test_the_finished_smoke_run_plans_nothing(tmp_path_factory, tmp_path):
    assert _planned(tmp_path_factory, tmp_path, smoke_config()) == {}


@pytest.mark.slow
def test_reordered_metrics_keys_and_top_k_words_rerun_no_layer_measurement(tmp_path_factory, tmp_path):
    """The metrics section was passed whole: the same keys in another order, or a new top_k_words (which only
    the combining step reads), reran every layer of every model."""
    config = smoke_config()
    metrics = dict(reversed(list({**config["metrics"], "postprocess": ["abtt", "standardize", "none"]}.items())))
    config["metrics"] = {**metrics, "top_k_words": 5}
    planned = _planned(tmp_path_factory, tmp_path, config)
    assert "measure_layer" not in planned, planned
    assert planned["combine_layers"] == 2, planned  # the context-specific words, and what is drawn from them


@pytest.mark.slow
def test_a_new_label_redraws_the_reports_only(tmp_path_factory, tmp_path):
    config = smoke_config()
    config["models"]["tiny-gpt2"]["label"] = "renamed GPT-2"
    planned = _planned(tmp_path_factory, tmp_path, config)
    assert set(planned) <= {"figures", "model_figures", "senses_figures", "summary", "table1", "all"}, planned
    assert planned["figures"] == planned["summary"] == planned["table1"] == 1, planned


@pytest.mark.slow
def test_a_measurement_setting_reruns_every_layer_and_nothing_upstream(tmp_path_factory, tmp_path):
    config = copy.deepcopy(smoke_config())
    config["metrics"]["bootstrap_resamples"] = 50
    planned = _planned(tmp_path_factory, tmp_path, config)
    assert planned.get("measure_layer") == sum(LAYERS.values()), planned
    assert not {"extract", "plan", "materialise_model", "words", "corpus"} & set(planned), planned


@pytest.mark.slow
def test_a_pooling_change_re_extracts_that_model_only(tmp_path_factory, tmp_path):
    config = smoke_config()
    config["models"]["tiny-gpt2"]["pooling"] = "mean"
    planned = _planned(tmp_path_factory, tmp_path, config)
    assert planned["extract"] == 4 and planned["measure_layer"] == LAYERS["tiny-gpt2"], planned
    assert not {"materialise_model", "download_model", "plan", "words"} & set(planned), planned
    assert yaml.safe_dump(config)  # the edited config is a valid one
