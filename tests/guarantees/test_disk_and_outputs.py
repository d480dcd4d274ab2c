"""Guarantees: extraction checks free disk before writing; every output is written under a temporary
name and renamed when complete; no rule writes outside its declared outputs."""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import PROJECT, load_model, materialise, run_snakemake, write_config
from contextuality.core import diskspace, layout
from contextuality.core.diskspace import DiskSpaceError
from contextuality.corpus.words import word_table
from contextuality.extraction.extract import extract_shard
from contextuality.extraction.plan import plan_model
from contextuality.extraction.writer import DiskFullError
from contextuality.models import loading
from workflow_runs import failure, smoke_audit, smoke_config, smoke_config_path

TEXTS = ["The dog runs.", "A cat sleeps on the mat.", "The dog sleeps."]


def _extract_shard(loaded, plan, path, storage_dtype: str, disk_factor: float):
    """The tiny model's shard of ``plan`` written to ``path``: the first piece of each word, batches of 2, on the CPU."""
    return extract_shard(loaded, plan, path, pooling="first", batch_size=2, storage_dtype=storage_dtype, device="cpu",
                         disk_factor=disk_factor, attrs={})  # fmt: skip


@pytest.mark.parametrize(
    "dtype, ways",
    [
        (
            "float32",
            "free space, set extraction.storage_dtype: float16 (half the bytes of float32), or set corpus.max_sentences",
        ),
        ("float16", "free space, or set corpus.max_sentences (the vectors are float16 already)"),
    ],
)
def test_extraction_that_does_not_fit_on_disk_stops_with_the_numbers_before_writing(tmp_path, monkeypatch, dtype, ways):
    """The numbers and the ways out; float16 storage is suggested only where the vectors are not float16 already."""
    sentences = pd.DataFrame({"sentence_id": range(len(TEXTS)), "text": TEXTS})
    sentences.to_parquet(tmp_path / "sentences.parquet")
    spec = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}
    record = materialise("m", spec, tmp_path / "model", sentences_parquet=tmp_path / "sentences.parquet", seed=1)
    loaded = load_model(record, tmp_path / "model" / "model", spec)
    asked = []

    def tiny_disk(path):
        asked.append(Path(path))
        return shutil._ntuple_diskusage(total=10**6, used=10**6 - 1000, free=1000)

    monkeypatch.setattr(diskspace.shutil, "disk_usage", tiny_disk)
    out = tmp_path / "out"
    out.mkdir()
    words = word_table(sentences)
    plan = plan_model(loaded, sentences, words, indexing="word", tokenization="natural", policy="truncate")
    needed = len(plan.units) * 2 * 16 * (4 if dtype == "float32" else 2)  # units x layers (input + 1) x dims x bytes
    with pytest.raises(DiskSpaceError) as caught:
        _extract_shard(loaded, plan, out / "shard.h5", dtype, disk_factor=1.5)
    assert str(caught.value) == (
        f"not enough disk for {out / 'shard.h5'}: it needs {diskspace._size(needed)} x margin 1.5 "
        f"(extraction.min_free_disk_factor) = {diskspace._size(needed * 1.5)}, and 1.00 kB are free; {ways}"
    )
    assert asked == [out]
    assert [path.name for path in out.iterdir()] == [".disk-reservations"]  # nothing written, not even a temporary file
    assert list((out / ".disk-reservations").glob("*.json")) == []


def test_concurrent_jobs_cannot_all_pass_on_the_same_free_space(tmp_path, monkeypatch):
    """Two extractions that each fit, but not together: the second one is refused while the first holds its
    reservation, and passes once the first is done (or its process died)."""
    import subprocess
    import sys

    free = 10_000
    monkeypatch.setattr(
        diskspace.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - free, free)
    )
    results = tmp_path / "results" / "embeddings" / "m" / "shards"
    results.mkdir(parents=True)
    with diskspace.reserve(results / "shard_0.h5", 6_000, 1.2):
        with pytest.raises(
            DiskSpaceError,
            match=r"shard_1\.h5: it needs 6.00 kB x margin 1.2 .* = 7.20 kB, and 10.00 kB are "
            r"free, of which 6.00 kB are reserved by other running jobs",
        ):
            with diskspace.reserve(results / "shard_1.h5", 6_000, 1.2):
                pass
    with diskspace.reserve(results / "shard_1.h5", 6_000, 1.2):  # the first job is done: its space is free again
        pass
    # a reservation whose process is gone (killed: no lock held) does not count
    folder = diskspace.reservation_dir(results / "shard_0.h5")
    code = (
        "import json, os, sys; from pathlib import Path; folder = Path(sys.argv[1]);"
        "(folder / 'dead-1-shard_0.h5.json').write_text(json.dumps({'bytes': 9000}))"
    )
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True)
    assert folder == tmp_path / ".disk-reservations"
    with diskspace.reserve(results / "shard_1.h5", 6_000, 1.2):
        pass
    assert list(folder.glob("*.json")) == []


def test_a_disk_that_fills_mid_write_gives_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    sentences = pd.DataFrame({"sentence_id": range(len(TEXTS) * 20), "text": TEXTS * 20})
    sentences.to_parquet(tmp_path / "sentences.parquet")
    spec = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}
    record = materialise("m", spec, tmp_path / "model", sentences_parquet=tmp_path / "sentences.parquet", seed=1)
    loaded = load_model(record, tmp_path / "model" / "model", spec)
    plan = plan_model(
        loaded, sentences, word_table(sentences), indexing="word", tokenization="natural", policy="truncate"
    )
    import h5py

    calls = []
    original = h5py.Dataset.__setitem__

    def fill_up(self, key, value):  # what HDF5 raises when write() hits ENOSPC
        calls.append(key)
        if len(calls) > 2:
            raise OSError(
                "Can't synchronously write data (file write failed: errno = 28, error message = 'No space left on device')"
            )
        return original(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", fill_up)
    out = tmp_path / "results" / "shards"
    out.mkdir(parents=True)
    needed = len(plan.units) * 2 * 16 * 4
    with pytest.raises(DiskFullError) as caught:
        _extract_shard(loaded, plan, out / "shard_0.h5", "float32", disk_factor=1.0)
    message = str(caught.value)
    assert message.startswith(
        f"{out / 'shard_0.h5'}: the disk filled up while writing it: it needs {needed:,} bytes and "
    )
    assert message.endswith(
        "are free; nothing partial was kept (free space, set extraction.storage_dtype: float16 (half "
        "the bytes of float32), or set corpus.max_sentences)"
    )
    assert "\n" not in message
    assert [path for path in out.iterdir()] == []  # no shard, no temporary file


@pytest.mark.slow
def test_workflow_stops_an_extraction_that_does_not_fit_on_disk(tmp_path):
    config = smoke_config(corpus={"max_sentences": 40}, extraction={"min_free_disk_factor": 1e15, "n_shards": 1})
    config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}
    target = "results/embeddings/sts/tiny-gpt2/shards/shard_0.h5"
    result = run_snakemake(tmp_path, target, "--cores", "2", configfile=write_config(tmp_path / "c.yaml", config))
    assert result.returncode != 0, failure(result)
    log = (tmp_path / "logs" / "extract" / "sts" / "tiny-gpt2" / "shard_0.log").read_text()
    assert "not enough disk for results/embeddings/sts/tiny-gpt2/shards/shard_0.h5: it needs " in log
    assert "x margin 1e+15 (extraction.min_free_disk_factor) = " in log
    first = result.stderr.strip().splitlines()
    assert any(
        line.startswith("not enough disk for results/embeddings/sts/tiny-gpt2/shards/shard_0.h5") for line in first
    )
    # only the plan's small tables (written before extraction) exist: no shard, layer or temporary file
    embeddings = tmp_path / "results" / "embeddings" / "sts" / "tiny-gpt2"
    assert sorted(path.name for path in embeddings.rglob("*") if path.is_file()) == [
        "losses.json",
        "occurrences.parquet",
        "tokens.parquet",
        "units.parquet",
    ]


# --------------------------------------------------------------------------------------------------
# Outputs of the whole smoke pipeline


@pytest.fixture(scope="module")
def smoke(smoke_run):
    workdir = smoke_run
    summary = run_snakemake(workdir, "--summary", configfile=smoke_config_path())
    assert summary.returncode == 0, failure(summary)
    rows = [line.split("\t") for line in summary.stdout.splitlines()[1:] if "\t" in line]
    outputs = {row[0] for row in rows}
    logs = {log.strip() for row in rows for log in row[3].split(",") if log.strip() and log.strip() != "-"}
    files = {
        str(path.relative_to(workdir))
        for path in workdir.rglob("*")
        if path.is_file()
        and ".snakemake" not in path.parts
        and path.name != ".snakemake_timestamp"  # Snakemake's own mark in a folder output, not a rule's write
    }
    # Snakemake's own timings of the heavy jobs (their rules' `benchmark:` files), written by Snakemake
    # itself once a job ends, like its logs: declared by the rules, but not job outputs
    benchmarks = {name for name in files if (layout.parse(name) or ("",))[0].endswith("_BENCHMARK")}
    # every shard and every layer of the two smoke models, every shard of their usages' store, their sense jobs
    # shards 5, layers 7, usage shards 5, sense jobs 2; corpus, words, the tagger's job (sense_tags); per model
    # plan, manifest, combine, and the usages' plan and manifest; the similarity stage: per model its sample and
    # within table, and the one pair's table; each model's build (materialise_model)
    assert len(benchmarks) == 5 + 7 + 5 + 2 + 3 + 2 * 5 + 2 * 2 + 1 + 2, sorted(benchmarks)
    return workdir, outputs, logs, files - benchmarks, smoke_audit()


def _declared_by(path: str, outputs: set[str]) -> bool:
    """A declared file, or a file of a declared tar's unpacked folder (the model folders: model.tar -> model/)."""
    parts = Path(path).parts
    return any(
        str(Path(*parts[:depth])) in outputs or f"{Path(*parts[:depth])}.tar" in outputs
        for depth in range(len(parts), 0, -1)
    )


@pytest.mark.slow
def test_no_rule_writes_outside_its_declared_outputs(smoke):
    workdir, outputs, logs, files, _ = smoke
    assert {
        "results/tables/summary.md",
        "results/metrics/sts/tiny-bert/pcs/layer_00.txt",
        "resources/models/tiny-bert/model.tar",
        "resources/models/tiny-bert/source.json",
        "results/embeddings/sts/tiny-bert/layers/layer_02.h5",
    } <= outputs
    undeclared = sorted(path for path in files if not path.startswith("logs/") and not _declared_by(path, outputs))
    assert undeclared == []
    assert sorted(path for path in files if path.startswith("logs/") and path not in logs) == []
    assert all(path.split("/")[0] in ("results", "resources", "logs") for path in files)
    assert not [path for path in files if ".tmp-" in path]  # no temporary left behind
    # a model folder holds what its source.json records: its weights, checksummed
    for record_path in workdir.glob("resources/models/*/source.json"):
        record = json.loads(record_path.read_text())
        folder = record_path.parent / "model"
        assert loading.weights_digest([folder / name for name in record["weights"]]) == record["weights_sha256"]


@pytest.mark.slow
def test_every_output_is_written_under_a_temporary_name_then_renamed(smoke):
    """Every result file became visible by a rename (itself or its folder), never by writing in place."""
    workdir, outputs, _, files, audit = smoke
    root = str(workdir) + os.sep
    renamed = {
        record["dst"][len(root) :] for record in audit if record["event"] == "rename" and record["dst"].startswith(root)
    }
    written_in_place = {
        record["path"][len(root) :]
        for record in audit
        if record["event"] == "write" and record["path"].startswith(root)
    }
    results = sorted(path for path in files if not path.startswith("logs/"))
    assert len(results) > 50
    not_renamed = [
        path
        for path in results
        if not any(str(Path(*Path(path).parts[:d])) in renamed for d in range(1, len(Path(path).parts) + 1))
    ]
    assert not_renamed == []
    assert sorted(set(results) & written_in_place) == []
    # and the temporary names were what got written
    temporaries = [record for record in audit if record["event"] == "rename" and record["dst"].startswith(root)]
    assert all(Path(record["src"]).name.startswith(f".{Path(record['dst']).stem}.tmp-") for record in temporaries)


@pytest.mark.slow
def test_jobs_write_nothing_outside_the_run_directory_and_the_temp_dir(smoke):
    """In particular nothing under the project, where the config's data folders (corpus, benchmarks) live."""
    workdir, _, _, _, audit = smoke
    allowed = [str(workdir) + os.sep, tempfile.gettempdir() + os.sep, "/dev/", os.path.expanduser("~/.cache") + os.sep]
    jobs = [record for record in audit if "/.snakemake/scripts/" in record["argv0"]]
    assert len({record["argv0"] for record in jobs}) >= 20  # every job process was audited
    paths = [record.get("dst") or record["path"] for record in jobs]
    outside = collections.Counter(path for path in paths if not any(path.startswith(prefix) for prefix in allowed))
    assert dict(outside) == {}
    project = [path for path in paths if path.startswith(str(PROJECT) + os.sep) and "__pycache__" not in path]
    assert project == []


def _missing_outputs_planned(dry_run_output: str) -> set[str]:
    """The files `snakemake -n` plans to write because they are missing (its jobs' 'Missing output files')."""
    planned = set()
    for line in dry_run_output.splitlines():
        if "reason: Missing output files:" in line:
            files = line.split("Missing output files:", 1)[1].split(";", 1)[0]
            planned |= {name.strip() for name in files.split(",")}
    return planned


@pytest.mark.slow
def test_every_deliverable_deleted_from_a_finished_run_is_rebuilt(smoke, tmp_path):
    """Snakemake rebuilds a deleted output only when something asks for it: each kind of file a job writes
    under results/ (a figure's PDF, claims.csv, a model's words.parquet, a layer's PCs, ...), deleted from a
    finished run, is planned again by `snakemake -n`.

    Two dry runs, each with a batch of the files deleted at once (it was one dry run per file, about 60):
    Snakemake lists the missing declared outputs of every job in its DAG, so a file planned in a batch is
    one planned when deleted alone. The DAG is the same whatever is missing, except past a checkpoint that
    will rerun (materialise_model: a random model's tokenizer is built from the corpus), which Snakemake
    cannot plan beyond; so the corpus's files are a batch of their own. A file no batch plans is deleted
    alone, so that the test names exactly the files nothing would rebuild."""
    workdir, _, _, files, _ = smoke
    scratch = tmp_path / "run"
    shutil.copytree(workdir, scratch, symlinks=True)
    kinds = {}
    for name in sorted(files):
        if name.startswith("results/"):
            kind = (layout.parse(name) or (name,))[0]
            kinds.setdefault(name if kind in ("TABLE", "FIGURE") else kind, name)  # each table and figure file
    assert len(kinds) >= 25, sorted(kinds)

    def planned_without(names) -> set[str]:
        for name in names:
            (scratch / name).unlink()
        result = run_snakemake(scratch, "-n", "--cores", "2", configfile=smoke_config_path())
        for name in names:
            shutil.copy2(workdir / name, scratch / name)
        assert result.returncode == 0, failure(result)
        return _missing_outputs_planned(result.stdout)

    corpus = [name for name in kinds.values() if name.startswith("results/corpora/")]
    rest = [name for name in kinds.values() if name not in corpus]
    assert corpus and rest
    not_planned = (set(corpus) - planned_without(corpus)) | (set(rest) - planned_without(rest))
    not_rebuilt = sorted(name for name in not_planned if name not in planned_without([name]))
    assert not_rebuilt == []
