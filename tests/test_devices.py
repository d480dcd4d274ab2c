"""GPU placement: one policy, Snakemake's resources. A job computes on a GPU when its rule gave it one,
a scheduler's device is honoured, and local shards never share a device at once.

No GPU is needed: torch.cuda is mocked for the unit tests, and the Snakemake runs use the test hook
``TEST_FAKE_GPUS`` of ``tests/hooks/sitecustomize.py`` (same device choice and leases, computation on
the CPU, each shard's device and lease times appended to ``resources/.gpu-leases/fake-devices.jsonl``).
"""

from __future__ import annotations

import json
import os
import socket

import pytest
import torch
import yaml

from conftest import BENCHMARK_DIR, PROJECT, STS_DIR, run_snakemake, write_config
from contextuality.extraction.devices import LOCAL_GPUS_ENV, DeviceError, choose_device

HOOKS = PROJECT / "tests" / "hooks"


@pytest.fixture
def cuda(monkeypatch):
    """Pretend CUDA with a given number of devices; no scheduler variables unless a test sets them."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(LOCAL_GPUS_ENV, raising=False)

    def set_devices(count: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return set_devices


@pytest.mark.parametrize("requested", ["auto", "cuda"])
@pytest.mark.parametrize("local_gpus", [0, 4])
def test_a_gpu_given_by_the_scheduler_is_cuda_0(cuda, monkeypatch, tmp_path, requested, local_gpus):
    cuda(1)  # the job sees only its own GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # e.g. SLURM gave this job physical GPU 3
    device, lease = choose_device(requested, 1, shard=5, lease_dir=tmp_path / "leases", local_gpus=local_gpus)
    assert (device, lease) == ("cuda:0", None)
    assert not (tmp_path / "leases").exists()  # no lease files on a cluster's shared filesystem


def test_a_job_computes_on_a_gpu_only_when_its_rule_gave_it_one(cuda, tmp_path):
    cuda(2)
    assert choose_device("auto", 0, 0, tmp_path) == ("cpu", None)  # CUDA present, but no gpu resource
    assert choose_device("cpu", 1, 0, tmp_path) == ("cpu", None)
    assert choose_device("cuda:1", 1, 0, tmp_path) == ("cuda:1", None)
    with pytest.raises(
        DeviceError,
        match=r"extraction.device is 'cuda' but this extraction job was given no GPU: run with --resources gpu=N",
    ):
        choose_device("cuda", 0, 0, tmp_path)
    cuda(0)
    with pytest.raises(DeviceError, match="torch sees no CUDA device"):
        choose_device("auto", 1, 0, tmp_path)


def test_local_shards_lease_distinct_devices_of_the_runs_gpus(cuda, tmp_path):
    cuda(4)  # the machine has 4, the run was given 2 (--resources gpu=2)
    first, lease_first = choose_device("cuda", 1, shard=1, lease_dir=tmp_path, local_gpus=2)
    second, lease_second = choose_device("cuda", 1, shard=1, lease_dir=tmp_path, local_gpus=2)  # same preference
    assert (first, second) == ("cuda:1", "cuda:0")
    lease_first.close()
    third, lease_third = choose_device("auto", 1, shard=3, lease_dir=tmp_path, local_gpus=2)  # freed by the first
    assert third == "cuda:1"
    lease_second.close()
    lease_third.close()


def test_the_run_gpu_count_comes_from_the_environment_the_workflow_sets(cuda, monkeypatch, tmp_path):
    cuda(8)
    monkeypatch.setenv(LOCAL_GPUS_ENV, "1")  # --resources gpu=1 on an 8-GPU machine: every shard on GPU 0
    device, lease = choose_device("cuda", 1, shard=5, lease_dir=tmp_path)
    assert device == "cuda:0"
    lease.close()


def test_several_visible_devices_are_leased_by_their_physical_ids(cuda, monkeypatch, tmp_path):
    cuda(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    first, lease_first = choose_device("cuda", 1, shard=0, lease_dir=tmp_path)
    second, lease_second = choose_device("cuda", 1, shard=0, lease_dir=tmp_path)
    assert (first, second) == ("cuda:0", "cuda:1")
    host = socket.gethostname()
    assert {path.name for path in tmp_path.iterdir()} == {f"{host}-gpu2.lock", f"{host}-gpu5.lock"}
    lease_first.close()
    lease_second.close()


def _config(tmp_path, device: str) -> dict:
    config = yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text())
    config["corpus"]["bundled_dir"] = str(STS_DIR)
    config["static"] = {"benchmark_dir": str(BENCHMARK_DIR)}
    config["extraction"].update({"device": device, "n_shards": 4})
    config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}  # one model keeps the run short
    return config


def test_extraction_declares_a_gpu_exactly_when_the_run_has_gpus(tmp_path):
    """The defaults (device auto, the machine's GPUs: none here) on any machine: no GPU is declared; with
    --resources gpu=2 every shard job declares one; device cuda asks for one, which a run without GPUs
    cannot give (the job then stops with the DeviceError tested above)."""
    # the other cases of the policy: tests/workflow/test_gpus.py; this one proves the extract rule's wiring
    cases = (("auto", ["--resources", "gpu=2"], 1),)
    for device, resources, expected in cases:
        workdir = tmp_path / f"{device}-{len(resources)}"
        workdir.mkdir()
        result = run_snakemake(
            workdir,
            "results/embeddings/sts/tiny-gpt2/shards/shard_0.h5",
            "-n",
            "--cores",
            "2",
            *resources,
            configfile=write_config(workdir / "c.yaml", _config(workdir, device)),
        )
        assert result.returncode == 0, result.stderr[-2000:]
        block = result.stdout[result.stdout.index("rule extract:") :].split("\n\n")[0]
        assert f"gpu={expected}" in block, (device, resources, block)


@pytest.mark.slow
def test_a_local_run_with_two_gpus_never_puts_two_shards_on_one_device(tmp_path):
    targets = [f"results/embeddings/sts/tiny-gpt2/shards/shard_{shard}.h5" for shard in range(4)]
    # 8 cores: cores alone would let all 4 shard jobs run at once; gpu=2 must hold it to 2
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")])),
        "TEST_FAKE_GPUS": "4",
    }
    result = run_snakemake(
        tmp_path,
        *targets,
        "--cores",
        "8",
        "--resources",
        "gpu=2",
        configfile=write_config(tmp_path / "devices.yaml", _config(tmp_path, "auto")),
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [
        json.loads(line) for line in (tmp_path / "resources/.gpu-leases/fake-devices.jsonl").read_text().splitlines()
    ]
    assert len(records) == len(targets)
    assert {record["device"] for record in records} == {"cuda:0", "cuda:1"}  # the run's 2 of the machine's 4
    for device in ("cuda:0", "cuda:1"):
        spans = sorted((r["start"], r["end"]) for r in records if r["device"] == device)
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), (device, spans)
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 2  # never more shards at once than GPUs
