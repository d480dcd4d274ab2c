"""What the Snakefile does once it has read the config, before any job (contextuality.workflow.prerun's
``check_before_jobs``, ``before_jobs`` and ``check_planned``; terminal.start_relay), and the rules' params and
resources (rule_params), called directly. The command-line cases that prove the wiring stay in tests/test_prerun.py
and tests/test_workflow.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import yaml

from conftest import PROJECT, with_absolute_data_paths
from contextuality.core import layout
from contextuality.core.runtime import TERMINAL_LINES_ENV
from contextuality.workflow import estimates, prerun, run_need
from contextuality.workflow.gpus import GpuPolicy
from contextuality.workflow.rule_params import JobResources, RuleParams
from contextuality.workflow.schema import ConfigError, load_settings
from contextuality.workflow.terminal import start_relay
from workflow_runs import DEVICE_SMOKE, smoke_config

DEFAULT = PROJECT / "config" / "config.yaml"


def _default(*overlays: dict) -> dict:
    from snakemake.utils import update_config

    config = with_absolute_data_paths(yaml.safe_load(DEFAULT.read_text()))
    for overlay in overlays:
        update_config(config, overlay)
    return config


def _before(settings, command="dry-run", *, given=None, targets=(), gpus=None, configfiles=()):
    return prerun.before_jobs(settings, gpus or GpuPolicy(settings), command, given_config=given or {},
                              default_config=DEFAULT, configfiles=configfiles, cores=2,
                              targets=list(targets))  # fmt: skip


@pytest.mark.parametrize("listed", ["", "NoDevFiles"])
def test_metrics_device_cuda_without_a_gpu_is_refused_before_any_job(monkeypatch, listed):
    """Hole 11: metrics.device cuda on a machine with no GPU stops the run, not every device job after the builds;
    with --resources gpu=N the run is planned (a cluster or a GPU the user vouches for)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    settings = load_settings(smoke_config(**{**DEVICE_SMOKE, "metrics": {**DEVICE_SMOKE["metrics"], "device": "cuda"}}))
    with pytest.raises(ConfigError) as refused:
        prerun.check_before_jobs(settings, GpuPolicy(settings, local=0, given=False), "dry-run")
    assert str(refused.value).startswith(
        "metrics.device: 'cuda' runs every device measurement job on a GPU, but this run has no GPU (this machine "
        f"shows none: CUDA_VISIBLE_DEVICES={listed!r} lists none)"
    ) and "set metrics.device: auto" in str(refused.value)
    prerun.check_before_jobs(settings, GpuPolicy(settings, local=1, given=True), "dry-run")
    prerun.check_before_jobs(settings, GpuPolicy(settings, local=0, on_cluster=True), "run")  # the nodes' GPUs
    prerun.check_before_jobs(settings, GpuPolicy(settings, local=0), None)  # lint, a graph: not this machine's


@pytest.mark.parametrize("case", ["missing_folder", "not_a_hf_folder", "missing_gguf", "missing_elmo_weights"])
def test_a_local_model_that_is_not_there_stops_the_run_before_any_job(tmp_path, monkeypatch, case):
    """It was found in the model's download job, after the corpus and the other models' builds, as "not a Hugging
    Face folder (no config.json)" even for a path that does not exist."""
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    entries = {
        "missing_folder": ({"source": "path", "path": str(tmp_path / "nosuch")}, "models.m.path: "
                           f"{tmp_path / 'nosuch'} does not exist; allowed: a Hugging Face model folder (config.json)"),
        "not_a_hf_folder": ({"source": "path", "path": str(empty)},
                            f"models.m.path: {empty} is not a Hugging Face model folder (no config.json); allowed: "),
        "missing_gguf": ({"source": "path", "path": str(empty), "gguf_file": "m.gguf"},
                         f"models.m.gguf_file: m.gguf is not in {empty}; allowed: the name of a GGUF file"),
        "missing_elmo_weights": ({"source": "elmo", "options": "https://example.org/options.json",
                                  "weights": str(tmp_path / "w.hdf5")},
                                 f"models.m.weights: {tmp_path / 'w.hdf5'} does not exist; allowed: a local file or"),
    }  # fmt: skip
    entry, expected = entries[case]
    config = smoke_config()
    config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"], "m": {**entry, "indexing": "word"}}
    settings = load_settings(config)
    with pytest.raises(ConfigError) as refused:
        prerun.check_before_jobs(settings, GpuPolicy(settings), "dry-run")
    assert any(line.strip().startswith(expected) for line in str(refused.value).splitlines()), str(refused.value)
    prerun.check_before_jobs(settings, GpuPolicy(settings), "report")  # a report reads no model


@pytest.mark.parametrize("machine_gb, refused", [(8, True), (32, False)])
def test_the_default_config_on_the_device_path_on_a_cpu_machine_is_checked_before_any_job(tmp_path, monkeypatch,
                                                                                          machine_gb, refused):  # fmt: skip
    """The default config with config/on-device.yaml on a CPU machine: on 32 GB every device job holds a layer and
    the run is planned; on 8 GB SmolLM2's sense job (two models, both corpora's rows of a layer, the sense work)
    cannot, and the run stops before any job, naming the job, the key and the ways out, not in that job after the
    downloads, builds and plans."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimates, "machine_memory_bytes", lambda: machine_gb * 10**9)
    settings = load_settings(_default(yaml.safe_load((PROJECT / "config" / "on-device.yaml").read_text())))
    gpus = GpuPolicy(settings, local=0)
    if not refused:
        prerun.check_before_jobs(settings, gpus, "dry-run")
        return
    with pytest.raises(ConfigError) as error:
        prerun.check_before_jobs(settings, gpus, "dry-run")
    lines = [line.strip() for line in str(error.value).splitlines() if line.strip().startswith("metrics.on_device: ")]
    assert lines == [
        "metrics.on_device: measure_senses of model 'smollm2' computes on torch's CPU backend (no GPU in this run) and "
        "needs about 7,912 MB to hold one layer beside its model and its work, more than "
        "metrics.device_memory_fraction 0.9 of this machine's 8,000 MB; raise metrics.device_memory_fraction (at most "
        "1), measure from the store (metrics.on_device: false), run where a GPU is visible, or on a machine with more "
        "memory"
    ]


def test_a_dry_run_prints_the_whole_runs_disk_and_time_and_a_config_leaving_the_default(tmp_path, monkeypatch, capsys):
    """Before any job: one line of the run's stored vectors, jobs and time; one line when --configfile replaces
    the default study and leaves its settings to the schema's defaults."""
    monkeypatch.chdir(tmp_path)
    config = _default()
    need = _before(load_settings(config), given=config, configfiles=[tmp_path / "c.yaml"])
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("contextuality: this run"))
    assert "stores about 14." in line and "GB free" in line and "on 2 CPU cores" in line
    assert "replaces" not in err and need.disk_bytes > 0  # the default study, with absolute paths
    only_models = {key: config[key] for key in ("models", "corpus", "static")}
    _before(load_settings(only_models), given=only_models, configfiles=[tmp_path / "mine.yaml"])
    err = capsys.readouterr().err
    assert "mine.yaml replaces" in err and "senses.max_lemmas: null, not 800" in err
    assert _before(load_settings(config), "report-less", given=config) is None and capsys.readouterr().err == ""


def test_a_run_whose_vectors_cannot_fit_stops_before_any_job_and_a_dry_run_only_prints_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    huge = {"source": "random", "architecture": "bert", "n_hidden_layers": 199, "hidden_size": 4096, "vocab_size": 400}
    settings = load_settings(_default() | {"models": {"huge": huge}, "senses": {"enabled": False}})
    _before(settings, "dry-run")
    assert " of vectors (huge " in capsys.readouterr().err
    with pytest.raises(ConfigError, match="not enough disk for this run: its stored vectors take about"):
        _before(settings, "run")
    _before(settings, "run", targets=["store"])  # a target may need a part of the run: checked once planned


def test_a_report_needs_the_runs_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(smoke_config())
    first = layout.path(layout.LAYERS_CSV, corpus="sts", model=next(iter(settings.models)))
    with pytest.raises(ConfigError, match=f"the report needs the run's results, and {first} is not there: pass"):
        _before(settings, "report")
    (tmp_path / first).parent.mkdir(parents=True)
    (tmp_path / first).write_text("")
    assert _before(settings, "report") is None


def test_named_targets_are_checked_against_the_shards_their_jobs_plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("contextuality.core.diskspace.free_bytes", lambda where: 1000)
    settings = load_settings(smoke_config())
    need = run_need.run_need(settings)
    job = SimpleNamespace(rule=SimpleNamespace(name="extract"),
                          wildcards_dict={"corpus": "sts", "model": "tiny-gpt2", "shard": "0"})  # fmt: skip
    with pytest.raises(ConfigError, match="not enough disk for the jobs of all: the shards they write take about "):
        prerun.check_planned(settings, need, lambda: [job] * 4, ["all"])
    prerun.check_planned(settings, need, lambda: [job], [])  # the whole run was checked before


def test_the_relay_is_named_to_the_jobs(tmp_path, monkeypatch):
    monkeypatch.delenv(TERMINAL_LINES_ENV, raising=False)
    shown = []
    relay = start_relay(shown.append, folder=tmp_path)
    try:
        assert os.environ[TERMINAL_LINES_ENV] == str(relay.path) and relay.path.parent == tmp_path
        with open(relay.path, "a") as lines:
            lines.write("a job's line\n")
    finally:
        relay.close()
    assert shown == ["a job's line"] and not relay.path.exists()


def test_the_rules_params_and_resources_come_from_the_settings():
    settings = load_settings(smoke_config(**DEVICE_SMOKE))
    params = RuleParams(settings)
    wildcards = SimpleNamespace(model="tiny-gpt2", corpus="sts")
    assert params.model_pairs == [("tiny-bert", "tiny-gpt2")] and set(params.model_labels) == {"tiny-bert", "tiny-gpt2"}
    assert params.model_sources["tiny-gpt2"] == {"source": settings.models["tiny-gpt2"].source}  # random: no download
    assert "n_shards" not in params.device_rows(wildcards) and "memory_mb" not in params.device_measure
    assert params.device_combine()["rows"](wildcards) == params.device_rows(wildcards)
    assert params.device_senses()["on_device"](wildcards) == {"shard": params.device_rows(wildcards), "batches": None}
    assert params.device_sample(wildcards) == {
        "pooling": params.similarity_pooling(wildcards),
        "max_rows": settings.similarity.max_rows,
    }
    assert params.model(lambda model: model.build)(wildcards)["architecture"] == "gpt2"
    store = RuleParams(load_settings(smoke_config(similarity={"enabled": False})))
    assert store.device_combine() == {} and store.device_senses() == {} and store.device_sample(wildcards) is None


def test_the_jobs_resources_are_the_estimates_of_the_wildcards_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(smoke_config(**DEVICE_SMOKE))
    model = settings.models["tiny-gpt2"]
    jobs = JobResources(settings, GpuPolicy(settings, local=0), machine_bytes=16 * 10**9)
    wildcards = SimpleNamespace(model="tiny-gpt2", corpus="sts", shard="0")
    record, tokens = "nosuch/source.json", "nosuch/tokens.parquet"
    files = SimpleNamespace(record=record, tokens=tokens, units=None, manifest="nosuch/manifest.json",
                            senses_tokens=tokens, senses_units=None)  # fmt: skip
    assert jobs.extraction_mem_mb(wildcards, files, 2) == estimates.extraction_mem_mb(model, record, 2, tokens, 0)
    assert jobs.measure_mem_mb(wildcards, files, 1) == settings.metrics.measure.memory_mb
    assert jobs.device_measure_runtime_min(wildcards, files, 1) == estimates.device_measure_runtime_min(
        model, settings.corpus, settings.metrics, record, 1, tokens
    )
    assert jobs.senses_mem_mb(wildcards, files, 1) == estimates.device_senses_mem_mb(
        model, settings.metrics, record, 1, tokens_paths=[tokens, tokens], units_paths=[None, None], gpus=0,
        machine_bytes=16 * 10**9,
    )  # fmt: skip
    store = JobResources(load_settings(smoke_config()), GpuPolicy(settings), None)
    assert store.senses_mem_mb(wildcards, files, 1) == estimates.whole_layer_mem_mb(files.manifest, 1)
    assert jobs.similarity_mem_mb([], 1) == settings.metrics.measure.memory_mb + estimates.MEASURE_BASE_MB
    built = jobs.materialise_mem_mb(wildcards, 1)
    assert built == jobs.materialise_mem_mb(wildcards, 2) // 2 and built >= estimates.EXTRACT_BASE_MB
    assert jobs.materialise_runtime_min(wildcards, 1) >= 10


def test_a_models_build_declares_its_weights_twice_beside_the_interpreter():
    """A model of 100 million parameters (its source.json's weights, else its shape's) holds 800 MB of float32
    weights twice over: read, then written."""
    settings = load_settings(_default())
    model = settings.models["minilm"]
    millions = run_need.params_millions(model, run_need.model_shape(model)[0])
    assert run_need.materialise_mem_mb(model, 1) == int(estimates.EXTRACT_BASE_MB + 8 * millions)
    assert run_need.materialise_runtime_min(model, 3) == int((10 + millions / 100) * 3)


def test_a_local_run_starts_the_relay_once_its_targets_planned_shards_fit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(TERMINAL_LINES_ENV, raising=False)
    settings = load_settings(smoke_config())
    need = run_need.run_need(settings)
    no_jobs = list
    assert prerun.start_of_run(settings, need, "dry-run", GpuPolicy(settings), no_jobs, []) == []
    assert prerun.start_of_run(settings, need, "run", GpuPolicy(settings, on_cluster=True), no_jobs, ["all"]) == []
    [relay] = prerun.start_of_run(settings, need, "run", GpuPolicy(settings), no_jobs, [])
    relay.close()
    assert relay.path.parent == tmp_path / ".snakemake" and os.environ[TERMINAL_LINES_ENV] == str(relay.path)
    prerun.check_before_jobs(settings, GpuPolicy(settings, local=0), "run", main_process=False)  # a job's process
