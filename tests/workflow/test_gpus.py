"""The run's GPU policy (contextuality.workflow.gpus), called directly: the count the run may use and each job
kind's `gpu` resource. tests/test_devices.py keeps one dry run proving the extract rule's wiring."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from contextuality.extraction.devices import LOCAL_GPUS_ENV, DeviceError
from contextuality.workflow.gpus import GpuPolicy, gpu_policy
from contextuality.workflow.schema import load_settings
from workflow_runs import DEVICE_SMOKE, smoke_config


def _settings(extraction="auto", measure="auto", on_device=True):
    metrics = {**DEVICE_SMOKE["metrics"], "device": measure, "on_device": on_device}
    return load_settings(smoke_config(extraction={"device": extraction, "store": not on_device}, metrics=metrics))


def _workflow(gpu=None, nodes=None, main=True, overwrite=None):
    registered = {}
    resources = {"_nodes": SimpleNamespace(value=nodes)}
    if gpu is not None:
        resources["gpu"] = SimpleNamespace(value=gpu)
    return SimpleNamespace(
        global_resources=resources,
        register_resource=lambda name, value: registered.__setitem__(name, value),
        is_main_process=main,
        resource_settings=SimpleNamespace(overwrite_resources=overwrite or {}),
        registered=registered,
    )


@pytest.mark.parametrize(
    ("extraction", "local", "expected"),
    [("auto", 0, 0), ("auto", 2, 1), ("cuda", 0, 1), ("cuda:1", 0, 1), ("cpu", 4, 0)],
)
def test_a_shard_job_asks_for_a_gpu_when_extraction_runs_on_cuda(extraction, local, expected):
    assert GpuPolicy(_settings(extraction=extraction), local=local).per_shard(None) == expected


@pytest.mark.parametrize(
    ("measure", "local", "expected"), [("auto", 0, 0), ("auto", 1, 1), ("cuda", 0, 1), ("cpu", 2, 0)]
)
def test_a_device_job_asks_for_a_gpu_when_metrics_device_is_cuda_or_auto_with_gpus(measure, local, expected):
    policy = GpuPolicy(_settings(measure=measure), local=local)
    assert policy.device_measure(None) == expected == policy.device_senses(None)
    assert GpuPolicy(_settings(measure=measure, on_device=False), local=local).device_senses(None) == 0


def test_set_resources_overrides_a_rules_own_gpu_count():
    given = {"extract": {"gpu": SimpleNamespace(value=3)}, "measure_model": {"gpu": 2}}
    policy = GpuPolicy(_settings(extraction="cpu", measure="cpu"), local=0, overwrite=given)
    assert (policy.extract_job(), policy.measure_job(), policy.senses_job()) == (3, 2, 0)


def test_without_a_count_the_run_takes_the_gpus_this_machine_shows_and_says_so(monkeypatch, capsys):
    monkeypatch.delenv(LOCAL_GPUS_ENV, raising=False)
    workflow = _workflow()
    policy = gpu_policy(workflow, _settings(), visible=lambda: 2)
    assert (policy.local, policy.given, policy.on_cluster) == (2, False, False) and workflow.registered == {"gpu": 2}
    assert os.environ[LOCAL_GPUS_ENV] == "2" and "2 GPUs found" in capsys.readouterr().err
    gpu_policy(_workflow(main=False), _settings(), visible=lambda: 2)  # a job's process: no line
    assert capsys.readouterr().err == ""


def test_a_given_count_or_a_cluster_asks_nothing_of_this_machine(monkeypatch):
    def never():
        raise AssertionError("asked this machine")

    policy = gpu_policy(_workflow(gpu=0), _settings(), visible=never)
    assert (policy.local, policy.given) == (0, True) and os.environ[LOCAL_GPUS_ENV] == "0"
    policy = gpu_policy(_workflow(nodes=10), _settings(), visible=never)
    assert (policy.local, policy.given, policy.on_cluster) == (0, False, True)


def test_a_bad_device_list_goes_up_as_a_device_error():
    def bad():
        raise DeviceError("CUDA_VISIBLE_DEVICES lists a device twice")

    with pytest.raises(DeviceError, match="twice"):
        gpu_policy(_workflow(), _settings(), visible=bad)
