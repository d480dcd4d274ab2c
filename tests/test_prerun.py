"""The checks made when the Snakefile reads the config, before any job (issue 42, holes 7-11 and the smaller
findings of the pre-run checks): each stops a run that would fail late in one line, and lets through what can run."""

from __future__ import annotations

import pytest

from conftest import run_snakemake, write_config
from contextuality.extraction import devices
from workflow_runs import DEVICE_SMOKE, smoke_config


def _dry_run(tmp_path, config: dict, *args: str, env=None):
    workdir = tmp_path / "run"
    workdir.mkdir(exist_ok=True)
    return run_snakemake(workdir, "-n", "--cores", "2", *args, configfile=write_config(tmp_path / "c.yaml", config),
                         env=env, timeout=600)  # fmt: skip


def _message(result) -> str:
    """The line after Snakemake's ``WorkflowError in file ...`` header: the project's one-line message."""
    lines = (result.stdout + result.stderr).splitlines()
    return next(lines[i + 1] for i, line in enumerate(lines) if line.startswith("WorkflowError"))


@pytest.mark.parametrize(
    "value, listed",
    [("NoDevFiles", []), ("-1", []), ("", []), ("0,-1,2", ["0"]), (" 0, 1", ["0", "1"]), ("1gpu2,2ampere", ["1", "2"]),
     ("GPU-5a1c,GPU-77e0", ["GPU-5a1c", "GPU-77e0"]), ("MIG-5a1c", ["MIG-5a1c"]), ("GPU-5a1c,0", ["GPU-5a1c"])],
)  # fmt: skip
def test_cuda_visible_devices_is_read_as_cuda_reads_it(monkeypatch, value, listed):
    """Hole 9: CUDA stops at the first entry that is neither an ordinal nor (all of one kind) a UUID."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert devices.visible_gpus() == len(listed)
    assert devices.listed_devices(value) == listed


def test_a_device_listed_twice_is_refused_in_one_line(monkeypatch, tmp_path):
    """Hole 9: CUDA shows no device for '0,0'; the run stops before any job instead of counting two GPUs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")
    with pytest.raises(devices.DeviceError, match=r"lists device 0 twice, which leaves CUDA no device: list each GPU"):
        devices.visible_gpus()
    result = _dry_run(tmp_path, smoke_config(), env={"CUDA_VISIBLE_DEVICES": "0,0"})
    assert result.returncode != 0
    assert "CUDA_VISIBLE_DEVICES='0,0' lists device 0 twice" in _message(result), result.stdout[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("visible", ["", "NoDevFiles"])
def test_metrics_device_cuda_without_a_gpu_is_refused_before_any_job(tmp_path, visible):
    """Hole 11: metrics.device cuda on a machine with no GPU stops the run, not every device job after the builds;
    with --resources gpu=N the run is planned (a cluster or a GPU the user vouches for)."""
    config = smoke_config(**DEVICE_SMOKE)
    config["metrics"]["device"] = "cuda"
    result = _dry_run(tmp_path, config, env={"CUDA_VISIBLE_DEVICES": visible})
    assert result.returncode != 0
    assert _message(result).startswith(
        "metrics.device: 'cuda' runs every device measurement job on a GPU, but this run has no GPU"
    ), result.stdout[-2000:]
    assert "set metrics.device: auto" in _message(result)
    assert _dry_run(tmp_path, config, "--resources", "gpu=1", env={"CUDA_VISIBLE_DEVICES": visible}).returncode == 0
