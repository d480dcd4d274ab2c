"""The device path (metrics.on_device: rule measure_model) against the store path, on the smoke run.

Torch's CPU backend runs the code a GPU runs. The smoke config measured on the device with no store writes no
HDF5 file and gives the store path's tables; a rerun, and a schedule of one layer per forward pass (each pass
stopping after its layer), give the same bytes; a pass that stops early gives the full pass's hidden states.
"""

from __future__ import annotations

import json
import logging
import tarfile
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import PROJECT
from contextuality.core import layout
from contextuality.core.archive import unpacked
from contextuality.measure import device_job
from contextuality.measure.device import plan as device_plan
from contextuality.measure.device.parts import rows_provenance
from contextuality.store.provenance import digest
from contextuality.workflow.checks import check_settings
from contextuality.workflow.schema import ConfigError, load_settings
from workflow_runs import DEVICE_SMOKE, assert_same_layer_table, smoke_config

MODELS = ("tiny-bert", "tiny-gpt2")


@pytest.fixture(scope="module")
def runs(smoke_run, device_run) -> tuple[Path, Path]:
    return smoke_run, device_run


@pytest.mark.slow
def test_the_device_path_writes_no_store_and_gives_the_store_paths_tables(runs):
    store, device = runs
    assert list((store / "results" / "embeddings").rglob("*.h5"))
    # no store of either corpus (the similarity samples, results/similarity and device/*.sample.h5, are not one)
    assert not list((device / "results" / "embeddings").rglob("*.h5")), (
        "a run with extraction.store: false wrote a store"
    )
    for corpus in ("sts", "usages"):
        assert not (device / "results" / "embeddings" / corpus / "tiny-gpt2" / "manifest.json").exists()
    for model in MODELS:
        a = pd.read_parquet(store / layout.path(layout.LAYERS_PARQUET, corpus="sts", model=model))
        b = pd.read_parquet(device / layout.path(layout.LAYERS_PARQUET, corpus="sts", model=model))
        assert_same_layer_table(b, a, model)
        words_a = pd.read_parquet(store / layout.path(layout.WORDS, corpus="sts", model=model))
        words_b = pd.read_parquet(device / layout.path(layout.WORDS, corpus="sts", model=model))
        pd.testing.assert_frame_equal(words_b, words_a, check_exact=False, atol=1e-5, rtol=0)
        for layer in range(len(a)):
            rows_a = json.loads(
                (store / layout.path(layout.LAYER_RECORD, corpus="sts", model=model, layer=layer)).read_text()
            )
            rows_b = json.loads(
                (device / layout.path(layout.LAYER_RECORD, corpus="sts", model=model, layer=layer)).read_text()
            )
            for row_a, row_b in zip(rows_a["postprocess"], rows_b["postprocess"]):
                for key, value in row_a.items():
                    if isinstance(value, float):
                        assert row_b[key] == pytest.approx(value, abs=1e-5, nan_ok=True), (model, layer, key)
                    else:
                        assert row_b[key] == value
            # made from the same plan, weights and settings (the device's record leaves out the number of shards)
            manifest = json.loads((store / layout.path(layout.MANIFEST, corpus="sts", model=model)).read_text())
            assert rows_b["provenance_sha256"] == digest(rows_provenance(manifest["provenance"]))


def _members(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as handle:
        return {member.name: handle.extractfile(member).read() for member in handle.getmembers() if member.isfile()}


@pytest.mark.slow
def test_a_rerun_and_one_layer_per_pass_give_the_same_bytes(runs, tmp_path, monkeypatch):
    """The job again, in this process: once as the run planned it (one group), once with room for one layer
    (a forward pass per layer, each stopping after it): byte for byte the run's own tar and record."""
    device = runs[1]
    config = json.loads(json.dumps(smoke_config(**DEVICE_SMOKE)))
    settings = load_settings(config)
    monkeypatch.chdir(device)
    for model in MODELS:
        record = Path(layout.path(layout.MODEL_RECORD, model=model))
        shape = json.loads(record.read_text())
        inputs = dict(
            read=device_job.ModelFiles(
                key=model, corpus="sts", record=record, model_dir=unpacked(layout.path(layout.MODEL_FOLDER, model=model)),
                tokens=Path(layout.path(layout.TOKENS, corpus="sts", model=model)),
                units=Path(layout.path(layout.UNITS, corpus="sts", model=model)),
                occurrences=Path(layout.path(layout.OCCURRENCES, corpus="sts", model=model)),
            ),
            shard=settings.shard(model), measure=settings.metrics.measure,
            place=device_job.DevicePlace("cpu", memory_fraction=0.9, job_memory_mb=16_384, threads=1, gpus=0),
        )  # fmt: skip
        expected = _members(Path(layout.path(layout.DEVICE_PART, corpus="sts", model=model, part=0)))
        assert len(expected) == 3 * shape["n_layers"]
        rerun = device_job.run_measure_model_job(**inputs, out=device_job.PartFiles(
            tmp_path / model / "a" / "part_0.tar", tmp_path / model / "a" / "part_0.json"))  # fmt: skip
        assert len(rerun["groups"]) == 1
        assert _members(tmp_path / model / "a" / "part_0.tar") == expected
        layer_bytes = rerun["rows"] * rerun["dim"] * 4  # float32 storage in the smoke config
        # a logger of the test's own: another test's logging setup (Snakemake's dictConfig) may disable the module's
        records: list[str] = []
        plan_log = logging.getLogger(f"test_device_path.{model}")
        plan_log.setLevel(logging.INFO)
        plan_log.propagate = False
        handler = logging.Handler()
        handler.emit = lambda record, records=records: records.append(record.getMessage())
        plan_log.addHandler(handler)
        with monkeypatch.context() as room:  # room for one layer and a half: one layer a group
            room.setattr(device_plan, "layer_room", lambda *_, bytes_=int(1.5 * layer_bytes): bytes_)
            split = device_job.run_measure_model_job(**inputs, out=device_job.PartFiles(
                tmp_path / model / "b" / "part_0.tar", tmp_path / model / "b" / "part_0.json"), log=plan_log)  # fmt: skip
        plan_log.removeHandler(handler)
        assert split["groups"] == [[layer] for layer in range(shape["n_layers"])]
        assert any(f"{shape['n_layers']} group(s) of <= 1 layers" in line for line in records)
        assert _members(tmp_path / model / "b" / "part_0.tar") == expected
        run_record = Path(layout.path(layout.DEVICE_RECORD, corpus="sts", model=model, part=0)).read_bytes()
        assert (
            (tmp_path / model / "a" / "part_0.json").read_bytes()
            == (tmp_path / model / "b" / "part_0.json").read_bytes()
            == run_record
        )


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_a_pass_stopped_after_a_layer_gives_the_full_passes_hidden_states(architecture):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaForCausalLM

    from contextuality.extraction.windows import model_forward, stop_after, transformer_blocks

    torch.manual_seed(0)
    model = {
        "bert": lambda: BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                             intermediate_size=64)),
        "gpt2": lambda: GPT2Model(GPT2Config(vocab_size=50, n_embd=32, n_layer=4, n_head=2)),
        "llama": lambda: LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4,
                                                      num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                                      bos_token_id=1, eos_token_id=2)),
    }[architecture]().eval()  # fmt: skip
    loaded = types.SimpleNamespace(model=model, n_layers=5)
    ids = torch.randint(3, 50, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    assert transformer_blocks(model, 5) is not None
    with torch.inference_mode():
        full = model_forward(loaded)(ids, mask)
        for last in range(4):
            early = stop_after(loaded, last, model_forward(loaded))(ids, mask)
            assert len(early) == last + 1
            for layer in range(last + 1):
                assert torch.equal(early[layer], full[layer]), (last, layer)
        assert stop_after(loaded, 4, full) is full  # the last layer: the full pass (after the final norm)


def test_groups_are_consecutive_balanced_and_refuse_a_device_without_room_for_one_layer():
    plan = device_plan.plan_groups(list(range(13)), 100, 1000, 0.9, 100)  # room 800: 8 layers a group
    assert plan.groups == [list(range(7)), list(range(7, 13))]
    assert device_plan.plan_groups(list(range(4)), 100, 10_000, 0.9, 100).groups == [[0, 1, 2, 3]]
    with pytest.raises(device_plan.DeviceMemoryError, match="one layer's rows take"):
        device_plan.plan_groups([0, 1], 10 * device_plan.MB, 5 * device_plan.MB, 0.9, 0)
    assert device_job.part_layers(13, 2, 0) == list(range(6)) and device_job.part_layers(13, 2, 1) == list(range(6, 13))


@pytest.mark.parametrize("keys, reader", [
    ({"extraction": {"store": False}}, "metrics.on_device: false"),
    ({"extraction": {"store": False}, "senses": {"enabled": True}}, "senses.enabled"),
    ({"extraction": {"store": False, "export_classic": True}, "metrics": {"on_device": True}}, "extraction.export_classic"),
])  # fmt: skip
def test_a_store_switched_off_that_a_rule_reads_is_refused_when_the_config_is_read(keys, reader):
    config = {"models": {"m": {"source": "random", "architecture": "gpt2"}}, "senses": {"enabled": False}}
    for section, values in keys.items():
        config.setdefault(section, {}).update(values)
    with pytest.raises(ConfigError) as raised:
        check_settings(load_settings(config))
    message = str(raised.value)
    assert "extraction.store: false, but this run reads the stored vectors (" in message and reader in message
    assert "set extraction.store: auto (or true)" in message


def test_store_auto_writes_the_store_only_when_a_rule_reads_it():
    def stores(**sections):
        config = {"models": {"m": {"source": "random", "architecture": "gpt2"}}, "senses": {"enabled": False}}
        for section, values in sections.items():
            config.setdefault(section, {}).update(values)
        return load_settings(config).stores

    assert stores(extraction={"store": "auto"}) is True  # measured from the store
    assert stores(extraction={"store": "auto"}, metrics={"on_device": True}) is False
    # the sense job computes its layers on the device too: no store, and store: false is not refused
    assert stores(extraction={"store": "auto"}, metrics={"on_device": True}, senses={"enabled": True}) is False
    check_settings(load_settings({"models": {"m": {"source": "random", "architecture": "gpt2"}},
                                  "extraction": {"store": False}, "metrics": {"on_device": True}}))  # fmt: skip
    assert stores(extraction={"store": "auto", "export_classic": True}, metrics={"on_device": True}) is True
    assert stores(metrics={"on_device": True}) is True  # the default keeps the store, the deliverable
    assert (PROJECT / "workflow" / "rules" / "metrics.smk").read_text().count("rule measure_model:") == 1


def test_measure_model_declares_a_gpu_exactly_when_the_run_has_gpus(tmp_path):
    """metrics.device auto: one GPU per device measurement job when the run has GPUs (--resources gpu=N, or the
    machine's when no count is given: none here), none without; cuda always asks for one."""
    from conftest import run_snakemake, write_config

    cases = (("auto", ["--resources", "gpu=2"], 1),)  # the others: tests/workflow/test_gpus.py
    for device, resources, expected in cases:
        workdir = tmp_path / f"{device}-{len(resources)}"
        workdir.mkdir()
        config = smoke_config(**DEVICE_SMOKE)
        config["metrics"]["device"] = device
        result = run_snakemake(workdir, "results/metrics/sts/tiny-gpt2/device/part_0.tar", "-n", "--cores", "2", *resources,
                               configfile=write_config(workdir / "c.yaml", config))  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        block = result.stdout[result.stdout.index("rule measure_model:") :].split("\n\n")[0]
        assert f"gpu={expected}" in block, (device, resources, block)
