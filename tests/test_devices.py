"""GPU placement: scheduler-given devices are honoured, and local shards never share a device at once.

No GPU is needed: torch.cuda is mocked for the unit tests, and the Snakemake run uses the documented
fake-device hook (CONTEXTUALITY_FAKE_GPUS=1: same device choice and leases, computation on the CPU,
each shard's device and lease times appended to resources/.gpu-leases/fake-devices.jsonl).
"""

from __future__ import annotations

import json
import socket

import pytest
import torch
import yaml

from conftest import BENCHMARK_DIR, PROJECT, STS_DIR, run_snakemake, write_config
from contextuality.devices import FAKE_GPUS_ENV, choose_device


@pytest.fixture
def cuda(monkeypatch):
    """Pretend CUDA with a given number of devices; no scheduler variables unless a test sets them."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(FAKE_GPUS_ENV, raising=False)

    def set_devices(count: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return set_devices


@pytest.mark.parametrize("requested", ["auto", "cuda"])
@pytest.mark.parametrize("n_gpus", [0, 4])
def test_a_gpu_given_by_the_scheduler_is_cuda_0(cuda, monkeypatch, tmp_path, requested, n_gpus):
    cuda(1)  # the job sees only its own GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # e.g. SLURM gave this job physical GPU 3
    device, lease = choose_device(requested, n_gpus, shard=5, lease_dir=tmp_path / "leases")
    assert (device, lease) == ("cuda:0", None)
    assert not (tmp_path / "leases").exists()  # no lease files on a cluster's shared filesystem


def test_cpu_requests_and_machines_without_cuda_stay_on_the_cpu(cuda, tmp_path):
    cuda(0)
    assert choose_device("auto", 0, 0, tmp_path) == ("cpu", None)
    cuda(2)
    assert choose_device("cpu", 2, 0, tmp_path) == ("cpu", None)
    assert choose_device("cuda:1", 2, 0, tmp_path) == ("cuda:1", None)


def test_local_shards_lease_distinct_devices(cuda, tmp_path):
    cuda(2)
    first, lease_first = choose_device("cuda", 2, shard=1, lease_dir=tmp_path)
    second, lease_second = choose_device("cuda", 2, shard=1, lease_dir=tmp_path)  # same preference
    assert (first, second) == ("cuda:1", "cuda:0")
    lease_first.close()
    third, lease_third = choose_device("cuda", 2, shard=3, lease_dir=tmp_path)  # freed by the first
    assert third == "cuda:1"
    lease_second.close()
    lease_third.close()


def test_several_visible_devices_are_leased_by_their_physical_ids(cuda, monkeypatch, tmp_path):
    cuda(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    first, lease_first = choose_device("cuda", 0, shard=0, lease_dir=tmp_path)
    second, lease_second = choose_device("cuda", 0, shard=0, lease_dir=tmp_path)
    assert (first, second) == ("cuda:0", "cuda:1")
    host = socket.gethostname()
    assert {path.name for path in tmp_path.iterdir()} == {f"{host}-gpu2.lock", f"{host}-gpu5.lock"}
    lease_first.close()
    lease_second.close()


def test_the_fake_device_hook_records_the_choice_and_computes_on_the_cpu(cuda, monkeypatch, tmp_path):
    cuda(0)
    monkeypatch.setenv(FAKE_GPUS_ENV, "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    device, lease = choose_device("cuda", 0, shard=2, lease_dir=tmp_path)
    assert device == "cpu"
    lease.close()
    record = json.loads((tmp_path / "fake-devices.jsonl").read_text())
    assert (record["shard"], record["device"], record["cuda_visible_devices"]) == (2, "cuda:0", "1")
    assert record["start"] <= record["end"]


@pytest.mark.slow
def test_a_local_run_with_two_gpus_never_puts_two_shards_on_one_device(tmp_path):
    config = yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text())
    config["corpus"]["bundled_dir"] = str(STS_DIR)
    config["static"] = {"benchmark_dir": str(BENCHMARK_DIR)}
    config["extraction"].update({"device": "cuda", "n_gpus": 2, "n_shards": 4})
    config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}  # one model keeps the run short
    targets = [f"results/embeddings/tiny-gpt2/shards/shard_{shard}.h5" for shard in range(4)]
    # 8 cores: cores alone would let all 4 two-thread shard jobs run at once; gpu=2 must hold it to 2
    result = run_snakemake(
        tmp_path, *targets, "--cores", "8", "--resources", "gpu=2",
        configfile=write_config(tmp_path / "devices.yaml", config), env={FAKE_GPUS_ENV: "1"}, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "resources/.gpu-leases/fake-devices.jsonl").read_text().splitlines()]
    assert len(records) == len(targets)
    assert {record["device"] for record in records} == {"cuda:0", "cuda:1"}
    for device in ("cuda:0", "cuda:1"):
        spans = sorted((r["start"], r["end"]) for r in records if r["device"] == device)
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), (device, spans)
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 2  # never more shards at once than GPUs
