"""The device path (rule measure_model) on the paths users take: a stateful ELMo's passes, a part made with other
settings, a changed part count, a damaged part, settings that change no number, a job killed near its end."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT, job_counts, materialise, run_snakemake, write_config
from contextuality.core import layout
from contextuality.core.archive import unpacked
from contextuality.core.digest import sha256_of
from contextuality.extraction.extract import load_for_extraction
from contextuality.measure import device_job
from contextuality.measure.similarity.sample import SampleRequest, read_sample
from contextuality.models.sources import write_source_record
from contextuality.workflow.schema import load_settings
from workflow_runs import DEVICE_SMOKE, failure, smoke_config

ELMO = PROJECT / "tests" / "data" / "elmo-golden"
SENTENCES = ["The dog runs .", "A cat sleeps on the mat, and the dog runs!", "Dogs run.", "The mat is red .",
             "A dog and a cat run on the red mat ."]  # fmt: skip


def test_a_stateful_elmo_in_several_groups_equals_one_group(tmp_path):
    """Every pass starts from the state extraction's starts from (zero): the layers of a later group are those of
    a one-pass run, to float rounding."""
    import torch

    from contextuality.corpus.words import word_table
    from contextuality.extraction.plan import plan_model

    spec = {"source": "elmo", "options": str(ELMO / "options.json"), "weights": str(ELMO / "lm_weights.hdf5"),
            "stateful": True, "batch_size": 2}  # fmt: skip
    record = materialise("elmo", spec, tmp_path / "elmo")
    write_source_record(record, tmp_path / "elmo" / "source.json")
    shard = load_settings({"models": {"elmo": spec}}).shard("elmo")
    loaded = load_for_extraction("elmo", shard, record, tmp_path / "elmo" / "model", "cpu")
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    plan = plan_model(loaded, sentences, word_table(sentences), indexing="word", tokenization="natural",
                      policy="truncate")  # fmt: skip
    shape = (len(plan.units), loaded.dim)

    def passes(groups):
        rows = {}
        for group in groups:
            resident = torch.empty((len(group), *shape), dtype=torch.float32)
            device_job.fill_group(loaded, plan, group, resident, shard, "cpu", desc="test")
            rows.update({layer: resident[slot].numpy().copy() for slot, layer in enumerate(group)})
        return rows

    one = passes([[0, 1, 2]])
    several = passes([[0], [1], [2]])
    for layer in range(3):
        np.testing.assert_allclose(several[layer], one[layer], atol=1e-6, rtol=0, err_msg=f"layer {layer}")


# --------------------------------------------------------------------------------------------------
# On copies of the finished smoke run measured on the device (the session's ``device_run``)

MODEL = "tiny-gpt2"  # 4 layers, pooling: last


@pytest.fixture
def scratch(device_run, tmp_path) -> tuple[Path, Path]:
    """A copy of the finished device run (times kept) that a test may damage, and its config."""
    workdir = tmp_path / "run"
    shutil.copytree(device_run, workdir, symlinks=True)
    return workdir, write_config(tmp_path / "device.yaml", smoke_config(**DEVICE_SMOKE))


def _part(name: str, part: int = 0, model: str = MODEL) -> Path:
    pattern = {"tar": layout.DEVICE_PART, "record": layout.DEVICE_RECORD}[name]
    return Path(layout.path(pattern, corpus="sts", model=model, part=part))


def _layers(model: str = MODEL) -> str:
    return layout.path(layout.LAYERS_PARQUET, corpus="sts", model=model)


def _job(settings) -> dict:
    """A device job's inputs for the smoke run's MODEL, part 0 of 1, run in the run's folder."""
    return dict(
        model_key=MODEL, corpus="sts", shard=settings.shard(MODEL), measure=settings.metrics.measure, requested_device="cpu",
        memory_fraction=0.9, job_memory_mb=16_384, parts=1, part=0,
        record_path=Path(layout.path(layout.MODEL_RECORD, model=MODEL)),
        model_dir=unpacked(layout.path(layout.MODEL_FOLDER, model=MODEL)),
        tokens_path=Path(layout.path(layout.TOKENS, corpus="sts", model=MODEL)),
        units_path=Path(layout.path(layout.UNITS, corpus="sts", model=MODEL)),
        occurrences_path=Path(layout.path(layout.OCCURRENCES, corpus="sts", model=MODEL)), threads=1, gpus=0,
    )  # fmt: skip


def _one_line(result, workdir: Path, pattern: str, log: str) -> None:
    assert result.returncode != 0, failure(result)
    assert re.search(pattern, result.stderr), failure(result)
    text = (workdir / log).read_text()
    assert re.search(pattern, text) and "Traceback" not in text, text


@pytest.mark.slow
def test_a_part_made_with_other_settings_is_refused_naming_the_key(scratch, monkeypatch):
    """A part measured with pooling: mean, copied beside a run configured last, was combined silently (the tables
    became the other run's)."""
    workdir, config = scratch
    monkeypatch.chdir(workdir)
    settings = load_settings(smoke_config(**DEVICE_SMOKE, models={**smoke_config()["models"], MODEL: {
        **smoke_config()["models"][MODEL], "pooling": "mean"}}))  # fmt: skip
    device_job.run_measure_model_job(**_job(settings), out_tar=_part("tar"), out_record=_part("record"))
    result = run_snakemake(workdir, _layers(), "--cores", "1", configfile=config)
    line = (rf"{_part('record')}: pooling is 'mean', but the config \(shard setting pooling\) has 'last': it was made "
            rf"by another model, plan or setting; delete {_part('record')} and rerun snakemake, which measures the part "
            "again")  # fmt: skip
    _one_line(result, workdir, line, layout.path(layout.COMBINE_LAYERS_LOG, corpus="sts", model=MODEL))


@pytest.mark.slow
def test_a_truncated_part_ends_in_one_line_and_its_advice_recovers(scratch, device_run):
    """A part's tar cut short in a member ended in tarfile's traceback naming no file."""
    workdir, config = scratch
    tar = workdir / _part("tar")
    member = layout.path(layout.in_metrics(layout.LAYER_WORDS), layer=3)
    with tarfile.open(tar) as handle:
        info = handle.getmember(member)
    with open(tar, "r+b") as handle:
        handle.truncate(info.offset_data + info.size // 2)
    target = layout.path(layout.LAYER_WORDS, corpus="sts", model=MODEL, layer=3)
    result = run_snakemake(workdir, target, "--cores", "1", configfile=config)
    line = (rf"{_part('tar')}: not a complete tar of the part's layers \(truncated or damaged: [^)]+\); delete "
            rf"{_part('tar')} and rerun snakemake, which measures the part again")  # fmt: skip
    _one_line(result, workdir, line, layout.path(layout.DEVICE_LAYER_LOG, corpus="sts", model=MODEL, layer=3))
    tar.unlink()  # the advice
    result = run_snakemake(workdir, _layers(), "--cores", "1", configfile=config)
    assert result.returncode == 0, failure(result)
    assert (workdir / _layers()).read_bytes() == (device_run / _layers()).read_bytes()


@pytest.mark.slow
def test_a_replaced_part_record_is_refused_with_advice_that_recovers(scratch, device_run):
    """A part record that its layer files do not match (replaced, or edited): the advice was to delete the layer
    file, which the same tar made again, and the same refusal followed."""
    workdir, config = scratch
    record = workdir / _part("record")
    edited = json.loads(record.read_text()) | {"provenance_sha256": "0" * 64}
    record.write_text(json.dumps(edited, indent=1) + "\n")
    result = run_snakemake(workdir, _layers(), "--cores", "1", configfile=config)
    folder = _part("record").parent
    line = (rf"per_layer/layer_00\.json: provenance_sha256 is '[0-9a-f]{{64}}', but {_part('record')} has '0{{64}}': "
            rf"the layer was measured on other rows; delete the model's part records \({folder}/part_\*\.json\) and "
            "rerun snakemake, which measures the parts again")  # fmt: skip
    _one_line(result, workdir, line, layout.path(layout.COMBINE_LAYERS_LOG, corpus="sts", model=MODEL))
    for path in (workdir / folder).glob("part_*.json"):  # the advice
        path.unlink()
    result = run_snakemake(workdir, _layers(), "--cores", "1", configfile=config)
    assert result.returncode == 0, failure(result)
    assert (workdir / _layers()).read_bytes() == (device_run / _layers()).read_bytes()


def _planned(workdir: Path, config: dict, tmp_path: Path) -> dict[str, int]:
    result = run_snakemake(workdir, "-n", "--cores", "1", configfile=write_config(tmp_path / "edited.yaml", config))
    assert result.returncode == 0, failure(result)
    return {rule: count for rule, count in job_counts(result.stdout).items() if rule != "total"}


@pytest.mark.slow
def test_shards_and_the_store_paths_memory_budget_rerun_no_device_measurement(device_run, tmp_path):
    """extraction.n_shards and metrics.memory_mb change no number the device path computes (it cuts no shard, and
    holds its layers whole): every device measurement was run again."""
    config = smoke_config(**DEVICE_SMOKE)
    config["extraction"]["n_shards"] = 2
    assert _planned(device_run, config, tmp_path) == {}
    config["metrics"]["memory_mb"] = 777  # the similarity stage's budget too: its own jobs take it as a param
    planned = _planned(device_run, config, tmp_path)
    assert not {"measure_model", "device_layer", "combine_layers", "measure_senses", "similarity_sample"} & set(planned)
    assert set(planned) <= {"similarity_model", "similarity_pair", "similarity_figures", "atlas", "all"}, planned


@pytest.mark.slow
def test_a_lowered_part_count_measures_the_parts_again_and_gives_the_same_tables(scratch, device_run):
    """metrics.device_parts lowered after a finished run (2, then 1): device_layer read a layer from a part that
    held no such layer and failed; now a part made for another count is measured again."""
    workdir, config = scratch
    two = write_config(workdir.parent / "two.yaml", smoke_config(**DEVICE_SMOKE | {"metrics": {
        **DEVICE_SMOKE["metrics"], "device_parts": 2}}))  # fmt: skip
    result = run_snakemake(workdir, _layers(), "--cores", "1", "--forcerun", "measure_model", configfile=two)
    assert result.returncode == 0, failure(result)
    with tarfile.open(workdir / _part("tar")) as handle:  # part 0 of 2: layers 0 and 1 only
        assert not any("layer_03" in name for name in handle.getnames())
    result = run_snakemake(workdir, _layers(), "--cores", "1", configfile=config)
    assert result.returncode == 0, failure(result)
    assert (workdir / _layers()).read_bytes() == (device_run / _layers()).read_bytes()


class _Killed(Exception):
    """The job's end, as a kill -9 in its third layer leaves it (its process gone, its folder as it was)."""


@pytest.mark.slow
def test_a_part_killed_near_its_end_measures_only_the_layers_it_had_left(device_run, tmp_path, monkeypatch):
    """A device job killed in its last layers measured every layer of its part again; now the layers it finished
    (their files and similarity sample rows) are kept, and the part's tar and sample are the uninterrupted run's."""
    monkeypatch.chdir(device_run)
    settings = load_settings(smoke_config(**DEVICE_SMOKE))
    real, measured = device_job.measure_rows_then, []

    def sample():
        return SampleRequest.of(Path(layout.path(layout.SIMILARITY_ROWS, corpus="sts")), MODEL,
                                settings.similarity.pooling_of(settings.models[MODEL]), settings.similarity.max_rows,
                                settings.extraction.storage_dtype, tmp_path / "part_0.sample.h5")  # fmt: skip

    def killed(rows, layer, *args, **kwargs):
        if layer == 2:
            raise _Killed
        return real(rows, layer, *args, **kwargs)

    def counted(rows, layer, *args, **kwargs):
        measured.append(layer)
        return real(rows, layer, *args, **kwargs)

    out = dict(out_tar=tmp_path / "part_0.tar", out_record=tmp_path / "part_0.json")
    monkeypatch.setattr(device_job, "measure_rows_then", killed)
    with pytest.raises(_Killed):
        device_job.run_measure_model_job(**_job(settings), **out, sample=sample())
    monkeypatch.setattr(device_job, "measure_rows_then", counted)
    device_job.run_measure_model_job(**_job(settings), **out, sample=sample())
    assert measured == [2, 3]
    assert _members(out["out_tar"]) == _members(device_run / _part("tar"))
    assert out["out_record"].read_bytes() == (device_run / _part("record")).read_bytes()
    rows_digest = sha256_of(layout.path(layout.SIMILARITY_ROWS, corpus="sts"))
    n_rows = len(sample().first)
    resumed, _ = read_sample(tmp_path / "part_0.sample.h5", model=MODEL, rows_digest=rows_digest, n_rows=n_rows)
    whole, _ = read_sample(device_run / layout.path(layout.DEVICE_SAMPLE, corpus="sts", model=MODEL, part=0),
                           model=MODEL, rows_digest=rows_digest, n_rows=n_rows)  # fmt: skip
    assert len(resumed) == len(whole) == 4 and all(np.array_equal(a, b) for a, b in zip(resumed, whole))
    assert not (tmp_path / "part_0.resume").exists() and not (tmp_path / "part_0").exists()  # nothing left behind


def _members(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as handle:
        return {member.name: handle.extractfile(member).read() for member in handle.getmembers() if member.isfile()}


_KILLED_UNPACK = """
import sys, tarfile, time
from pathlib import Path
from contextuality.core.archive import unpacked

def stalled(self, path, *args, **kwargs):  # a model's first file written, then killed before the rest
    (Path(path) / "config.json").write_text("{}")
    Path(sys.argv[2]).write_text("unpacking")
    time.sleep(600)

tarfile.TarFile.extractall = stalled
unpacked(sys.argv[1])
"""
START_LIMIT_S = 600  # the killed job's time to start and reach its first file


def test_a_model_copy_left_by_a_job_killed_while_unpacking_is_swept(tmp_path):
    """kill -9 during a model's unpack left its partial copy beside model.tar, never swept (a model's size each)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from contextuality.core.archive import pack

    folder = tmp_path / "m" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "weights.bin").write_bytes(b"w" * 1000)
    archive = pack(folder, tmp_path / "m" / "model.tar")
    shutil.rmtree(folder)
    started = tmp_path / "started"
    job = subprocess.Popen([sys.executable, "-c", _KILLED_UNPACK, str(archive), str(started)],
                           env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(PROJECT / "src"))})  # fmt: skip
    deadline = time.monotonic() + START_LIMIT_S  # a wall-clock limit on a Python start and one import: seconds idle
    while not started.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), (
        f"the unpacking job did not start (exit {job.poll()}) within {START_LIMIT_S} s; if it still ran, that is a "
        "slow machine's limit, not a broken install (this limit is START_LIMIT_S in tests/measure/test_device_trust.py)"
    )
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert len(list(archive.parent.glob(".model.tmp-*"))) == 1  # the killed job's partial copy
    assert unpacked(archive) == folder and (folder / "weights.bin").read_bytes() == b"w" * 1000
    assert not list(archive.parent.glob(".model.tmp-*")), list(archive.parent.iterdir())
