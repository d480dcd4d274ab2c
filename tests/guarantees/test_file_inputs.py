"""Guarantee: every bundled corpus file and benchmark file a job reads is one of its inputs, so editing one
in place reruns exactly what depends on it (a folder input does not: its time does not change when a
file inside is edited).

A smoke run of one model on copies of resources/sts and resources/benchmarks (the project's own files are
never edited) is edited file by file; dry runs show what Snakemake would rerun.
"""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import BENCHMARK_DIR, STS_DIR, job_counts, run_snakemake, write_config
from workflow_runs import failure, smoke_config

TABLE1 = "results/tables/table1.md"
MODEL = "tiny-bert"  # one shard and three layers: the shortest way to Table 1


def _copy_listed(source, listed: list[str], destination) -> None:
    for path in listed:
        target = destination / os.path.relpath(path, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def test_the_listed_release_files_are_all_the_corpus_reads(tmp_path):
    """The sts_pairs rule's inputs are complete: the corpus builds from them alone."""
    from contextuality.corpus.sts import bundled_release_paths, write_bundled_pairs

    years = [2012, 2013, 2014, 2015, 2016]
    listed = bundled_release_paths(STS_DIR, years, include_2012_train=True)
    _copy_listed(STS_DIR, listed, tmp_path / "sts")
    summary = write_bundled_pairs(tmp_path / "sts", years, True, tmp_path / "pairs.jsonl")
    assert len(summary) == len(listed) // 2  # an input and a gold file per sub-dataset read


def test_the_listed_benchmark_files_are_all_the_scoring_reads(tmp_path):
    """The scoring rules' inputs are complete: every Table 1 benchmark loads from them alone."""
    from contextuality.static.benchmark_files import benchmark_files
    from contextuality.static.scoring import load_benchmarks

    listed = benchmark_files(BENCHMARK_DIR)
    _copy_listed(BENCHMARK_DIR, listed, tmp_path / "benchmarks")
    data = load_benchmarks(tmp_path / "benchmarks")
    assert len(data["SemEval2012_2"].prototypes) == 79 and len(data["SimLex999"]) == 999
    assert len(listed) < sum(1 for path in BENCHMARK_DIR.rglob("*") if path.is_file())  # not the whole folder


@pytest.fixture(scope="module")
def finished_run_on_copies(tmp_path_factory):
    """Table 1 of one smoke model, from copies of the bundled corpus and benchmarks: (workdir, config, data)."""
    data = tmp_path_factory.mktemp("copied-inputs")
    shutil.copytree(STS_DIR, data / "sts")
    shutil.copytree(BENCHMARK_DIR, data / "benchmarks")
    config = smoke_config()
    config["models"] = {MODEL: config["models"][MODEL]}
    config["corpus"]["bundled_dir"] = str(data / "sts")
    config.setdefault("static", {})["benchmark_dir"] = str(data / "benchmarks")
    configfile = write_config(data / "config.yaml", config)
    workdir = tmp_path_factory.mktemp("copied-inputs-run")
    result = run_snakemake(workdir, TABLE1, "--cores", "2", configfile=configfile)
    assert result.returncode == 0, failure(result)
    return workdir, configfile, data


def _planned_after_editing(run, relative: str) -> dict[str, int]:
    """The jobs a dry run plans after ``relative`` (under the copied data) is edited in place; the file's
    bytes and time are put back afterwards, so each test starts from the finished run."""
    workdir, configfile, data = run
    path = data / relative
    before, text = path.stat(), path.read_bytes()
    finished = run_snakemake(workdir, TABLE1, "-n", "--cores", "1", configfile=configfile)
    assert finished.returncode == 0 and job_counts(finished.stdout) == {}, failure(finished)
    try:
        # an edit in place (the last 'e' made 'E'): same file, same folder; Snakemake compares the contents too
        edited = text[::-1].replace(b"e", b"E", 1)[::-1]
        assert edited != text
        path.write_bytes(edited)
        result = run_snakemake(workdir, TABLE1, "-n", "--cores", "1", configfile=configfile)
        assert result.returncode == 0, failure(result)
    finally:
        path.write_bytes(text)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return {rule: count for rule, count in job_counts(result.stdout).items() if rule != "total"}


@pytest.mark.slow
def test_an_edited_release_file_reruns_the_corpus_and_what_follows(finished_run_on_copies):
    planned = _planned_after_editing(finished_run_on_copies, "sts/2014/test/STS.input.images.txt")
    assert planned.get("sts_pairs") == 1 and planned.get("corpus") == 1, planned
    assert planned.get("static_scores") == 1 and planned.get("table1") == 1, planned  # everything after it


@pytest.mark.slow
def test_an_edited_benchmark_file_reruns_exactly_the_scoring_and_table1(finished_run_on_copies):
    for relative in [
        "benchmarks/wordsim/simlex999/SimLex-999.txt",
        "benchmarks/analogy/semeval2012_task2/GoldRatings/Testing/GoldRatings-8d.txt",
    ]:
        assert _planned_after_editing(finished_run_on_copies, relative) == {"static_scores": 1, "table1": 1}, relative


@pytest.mark.slow
def test_a_dataset_folder_edited_in_place_reruns_the_corpus(tmp_path):
    """corpus.source datasets: each file of the folder is an input (the folder's time does not change when a file
    inside is appended to, written in place or copied over), so corpus.json's digest describes the folder read."""
    import json

    folder = tmp_path / "data"
    (folder / "more").mkdir(parents=True)
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"text": f"Sentence {i} about a bank."}) + "\n" for i in range(4))
    )
    (folder / "more" / "train-2.jsonl").write_text(json.dumps({"text": "One more sentence."}) + "\n")
    config = smoke_config()
    config["corpus"] = {"source": "datasets", "path": str(folder)}
    configfile = write_config(tmp_path / "config.yaml", config)
    workdir = tmp_path / "run"
    workdir.mkdir()
    target = "results/corpora/corpus/corpus.json"  # a corpus not from STS is named `corpus` by default
    done = run_snakemake(workdir, target, "--cores", "1", configfile=configfile)
    assert done.returncode == 0, failure(done)
    first = json.loads((workdir / target).read_text())
    assert first["n_sentences"] == 5
    folder_time = folder.stat().st_mtime_ns
    for path, edit in [(folder / "train.jsonl", "append"), (folder / "more" / "train-2.jsonl", "copied over")]:
        later = (workdir / target).stat().st_mtime_ns + 10**9  # a second after the record: the edit's time
        if edit == "append":
            with open(path, "a") as handle:
                handle.write(json.dumps({"text": "Appended in place."}) + "\n")
        else:
            (tmp_path / "new.jsonl").write_text(json.dumps({"text": "Copied over the old file."}) + "\n")
            shutil.copyfile(tmp_path / "new.jsonl", path)
        os.utime(path, ns=(later, later))
        assert folder.stat().st_mtime_ns == folder_time  # the folder input alone would see nothing
        planned = run_snakemake(workdir, target, "-n", "--cores", "1", configfile=configfile)
        assert planned.returncode == 0 and job_counts(planned.stdout).get("corpus") == 1, (edit, failure(planned))
        rerun = run_snakemake(workdir, target, "--cores", "1", configfile=configfile)
        assert rerun.returncode == 0, failure(rerun)
    assert json.loads((workdir / target).read_text())["n_sentences"] == 6
