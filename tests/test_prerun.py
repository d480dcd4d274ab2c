"""The checks made when the Snakefile reads the config, before any job (each a run that once failed late,
or ran on a config it should have refused): each stops a run that would fail late in one line, and lets through
what can run."""

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


def test_a_device_listed_twice_is_refused_in_one_line(monkeypatch):
    """Hole 9: CUDA shows no device for '0,0'; the run stops before any job instead of counting two GPUs (the run's
    GPU policy asks the machine: tests/workflow/test_gpus.py)."""
    from types import SimpleNamespace

    from contextuality.workflow.gpus import gpu_policy
    from contextuality.workflow.schema import load_settings

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")
    with pytest.raises(devices.DeviceError, match=r"lists device 0 twice, which leaves CUDA no device: list each GPU"):
        devices.visible_gpus()
    workflow = SimpleNamespace(global_resources={"_nodes": SimpleNamespace(value=None)}, is_main_process=True)
    with pytest.raises(devices.DeviceError, match=r"CUDA_VISIBLE_DEVICES='0,0' lists device 0 twice"):
        gpu_policy(workflow, load_settings(smoke_config()))


# --------------------------------------------------------------------------------------------------
# Hole 7: the disk check sizes the corpus from the config's own input


def _default_with_corpus(senses: bool = True, **corpus):
    import yaml

    from conftest import PROJECT
    from contextuality.workflow.schema import load_settings

    config = yaml.safe_load((PROJECT / "config" / "config.yaml").read_text())
    config["corpus"] = {**config["corpus"], **corpus} if corpus.get("source", "bundled") == "bundled" else corpus
    config["senses"]["enabled"] = senses
    return load_settings(config)


def _parquet(path, rows: int):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": list(range(rows))}), path)


def test_a_stale_corpus_table_of_a_quick_run_does_not_size_the_real_one(tmp_path, monkeypatch):
    """After a quick run (corpus.max_sentences: 120) its tables stay; the real run's STS still counts 25,088
    sentences (its release's gold lines), its plans giving a rate of rows a sentence, not a count."""
    from contextuality.workflow import run_need
    from contextuality.workflow.schema import ConfigError

    monkeypatch.chdir(tmp_path)
    _parquet(tmp_path / "results/corpora/sts/sentences.parquet", 120)
    for model, rows in (("minilm", 1584), ("smollm2", 1368)):  # 13.2 and 11.4 rows a sentence, as STS's
        _parquet(tmp_path / f"results/embeddings/sts/{model}/units.parquet", rows)
        _parquet(tmp_path / f"results/embeddings/sts/{model}/tokens.parquet", 120)
    settings = _default_with_corpus()
    need = run_need.run_need(settings)
    assert 13e9 < need.disk_bytes < 15e9 and not need.unknown_corpora
    with pytest.raises(ConfigError, match="not enough disk for this run"):
        run_need.check_fits(settings, need, free=2 * 10**9)


@pytest.mark.parametrize("rows, fits", [(200, True), (300_000, False)])
def test_a_table_corpus_is_sized_by_its_own_rows(tmp_path, monkeypatch, rows, fits):
    """A 200-row CSV was refused as if it were STS (14 GB against 5 GB free: it needs 2.5 GB, the sense usages'
    vectors most of it); a 300,000-row one let through on 20 GB, though it needs about 150 GB. Its rows count (a
    quoted field over two lines is one row)."""
    from contextuality.workflow import run_need
    from contextuality.workflow.schema import ConfigError

    monkeypatch.chdir(tmp_path)
    table = tmp_path / "corpus.csv"
    table.write_text("text\n" + '"a sentence\nover two lines"\n' + "a plain sentence of some words\n" * (rows - 1))
    settings = _default_with_corpus(source="table", path=str(table))
    need = run_need.run_need(settings)
    free = 5 * 10**9 if fits else 20 * 10**9
    if fits:
        run_need.check_fits(settings, need, free=free)
    else:
        with pytest.raises(ConfigError, match="not enough disk for this run"):
            run_need.check_fits(settings, need, free=free)


def test_a_corpus_that_cannot_be_counted_is_said_unknown_and_never_refused(tmp_path, monkeypatch):
    """A hub dataset not yet downloaded: its size is unknown, said in the line, and no assumed size refuses it."""
    from contextuality.workflow import run_need

    monkeypatch.chdir(tmp_path)
    settings = _default_with_corpus(senses=False, source="datasets", dataset="someone/corpus", revision="a" * 40)
    need = run_need.run_need(settings)
    name = settings.corpus.name
    assert need.unknown_corpora == [name] and need.disk_bytes == 0
    line = run_need.estimate_line(settings, need, 2, 1)
    assert line.startswith(f"contextuality: this run stores vectors of a size unknown until {name} is read, with")
    assert f"{name}: a corpus counted only when its corpus job reads it" in line
    run_need.check_fits(settings, need, free=1)


@pytest.mark.parametrize("variant", ["store", "device", "two-corpora"])
def test_the_run_need_line_counts_the_jobs_the_run_plans(tmp_path, variant):
    """The line's job count is the dry run's: the device path's jobs instead of the store's (48, where the line
    said 69), and every corpus's (107 with a second corpus, where it said 75)."""
    import re

    from conftest import job_counts

    config = smoke_config(**(DEVICE_SMOKE if variant == "device" else {}))
    if variant == "two-corpora":
        extra = tmp_path / "extra.txt"
        extra.write_text("a sentence of a few words\nanother sentence of a few words\n" * 50)
        config["corpora"] = {"extra": {"source": "text", "path": str(extra)}}
    result = _dry_run(tmp_path, config)
    assert result.returncode == 0, result.stdout[-2000:]
    said = int(re.search(r"has about (\d+) jobs", result.stderr).group(1))
    assert said == job_counts(result.stdout)["total"]


# --------------------------------------------------------------------------------------------------
# Hole 8: named targets get the disk check of the jobs they plan


@pytest.mark.parametrize("target", ["all", "store"])
def test_named_targets_are_refused_when_the_shards_they_plan_cannot_fit(tmp_path, target):
    """`snakemake all` and `snakemake store` skipped the whole-run refusal: with 1 MB free the smoke run's shards
    (1.3 MB of the study corpus's, 5.4 MB with the usages') now stop them once planned, before any job."""
    from workflow_runs import hook_env

    result = run_snakemake(tmp_path, target, "--cores", "2", configfile=write_config(tmp_path / "c.yaml", smoke_config()),
                           env=hook_env(TEST_FREE_BYTES=str(10**6)), timeout=600)  # fmt: skip
    assert result.returncode != 0
    message = _message(result)
    assert message.startswith(f"not enough disk for the jobs of {target}: the shards they write take about "), message
    assert "and 1.00 MB are free in" in message and "or ask for fewer targets" in message
    assert not (tmp_path / "logs").exists()  # no job ran


def test_the_planned_check_counts_only_the_shards_planned(tmp_path, monkeypatch):
    """One shard of four is a quarter of its model's store of that corpus; a shard already there is replaced."""
    from contextuality.workflow import run_need
    from contextuality.workflow.schema import ConfigError, load_settings

    monkeypatch.chdir(tmp_path)
    settings = load_settings(smoke_config())
    need = run_need.run_need(settings)
    gpt2 = next(model for model in need.models if model.key == "tiny-gpt2")
    quarter = gpt2.store_bytes["sts"] // 4
    jobs = [("extract", {"corpus": "sts", "model": "tiny-gpt2", "shard": "0"}), ("plan", {"model": "tiny-bert"})]
    run_need.check_planned_fits(settings, need, jobs, quarter, "results", ["shard_0.h5"])
    with pytest.raises(ConfigError, match=r"not enough disk for the jobs of shard_0.h5: .* \(tiny-gpt2 "):
        run_need.check_planned_fits(settings, need, jobs, quarter - 1, "results", ["shard_0.h5"])


# --------------------------------------------------------------------------------------------------
# --config given a nested value: the overlay after the user's own config files


def test_a_nested_command_line_value_names_the_users_own_config_files_with_the_overlay(tmp_path):
    """The refusal suggested `--configfile config/config.yaml mine.yaml` even to a smoke run: it names the run's
    own config files now, then the overlay."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    write_config(workdir / "smoke.yaml", smoke_config())
    result = run_snakemake(workdir, "-n", "--cores", "1", "--configfile", "smoke.yaml", "--config",
                           "extraction={batch_size: 32}")  # fmt: skip
    assert result.returncode != 0
    assert (
        "extraction.batch_size: '32' has the wrong type; expected integer (Snakemake passes a value nested in "
        "--config, such as 'extraction={batch_size: 32}', as a string: put it in a YAML file and add that file after "
        "your config files, --configfile smoke.yaml mine.yaml)"
    ) in result.stdout + result.stderr, result.stdout[-2000:]


# --------------------------------------------------------------------------------------------------
# extraction.store: false: one rule for the target `store` and a store file named


@pytest.mark.parametrize(
    "target",
    ["store", "results/embeddings/sts/tiny-gpt2/shards/shard_0.h5", "results/embeddings/sts/tiny-gpt2/manifest.json",
     "results/embeddings/sts/tiny-gpt2/layers/layer_01.h5"],
)  # fmt: skip
def test_store_false_refuses_every_store_file_as_it_refuses_the_target_store(target):
    """`snakemake store` was refused, but a shard, the manifest or a layer file named on the command line was built
    (the targets are checked with the config, contextuality.workflow.checks.checked_settings)."""
    from contextuality.workflow.schema import ConfigError, load_settings
    from contextuality.workflow.targets import check_targets

    settings = load_settings(smoke_config(**DEVICE_SMOKE))
    with pytest.raises(ConfigError) as refused:
        check_targets([target], settings)
    assert (
        f"target {target}: extraction.store is false (never write the store); set extraction.store: auto or true "
        "to build it"
    ) in str(refused.value)
    check_targets(["results/embeddings/sts/tiny-gpt2/units.parquet"], settings)  # not a store file: planned as before


# --------------------------------------------------------------------------------------------------
# The run `snakemake --report` reports: the last one that built something


def test_only_a_run_that_built_something_becomes_the_last_run_and_the_report_names_the_runs(tmp_path):
    """A run that built nothing rewrote .snakemake/contextuality/run_config.yaml, and so did one that failed (a
    typo in one model): `--report` then read their configs, not the one of the run that worked."""
    import yaml

    from contextuality.workflow import targets as targets_module

    workdir = tmp_path / "run"
    workdir.mkdir()
    target = "results/corpora/sts/sentences.parquet"
    worked = smoke_config()
    nothing = smoke_config(metrics={"intra_sentences": 40})  # the corpus job's params unchanged: nothing to build
    (tmp_path / "empty.txt").write_text("")
    failed = smoke_config(corpus={"source": "text", "path": str(tmp_path / "empty.txt")})  # the corpus job fails
    failed["corpus"].pop("max_sentences")
    results = {}
    for name, config in (("worked", worked), ("nothing", nothing), ("failed", failed)):
        path = write_config(tmp_path / f"{name}.yaml", config)
        results[name] = run_snakemake(workdir, target, "--cores", "1", configfile=path, timeout=600)
    assert results["worked"].returncode == 0 and "Nothing to be done" in results["nothing"].stdout + results[
        "nothing"].stderr and results["failed"].returncode != 0, [r.stdout[-1500:] for r in results.values()]  # fmt: skip
    record = workdir / targets_module.RUN_CONFIG
    assert yaml.safe_load(record.read_text()) == worked
    assert record.read_text().startswith(f"# run of {tmp_path / 'worked.yaml'}, ")
    runs = list((workdir / targets_module.RUNS).glob("*.yaml"))
    assert [yaml.safe_load(path.read_text()) for path in runs] == [worked]
    report = run_snakemake(workdir, "--report", "r.html", "--cores", "1", timeout=600)  # its line, then its check
    line = next(line for line in report.stderr.splitlines() if line.startswith("contextuality: the report is of"))
    assert line.startswith(
        f"contextuality: the report is of the last run here that built something, whose config is "
        f"{targets_module.RUN_CONFIG} ({tmp_path / 'worked.yaml'}, "
    )
    assert (
        f"; --configfile names another: the runs recorded here, latest first, are {runs[0].relative_to(workdir)} ("
        in line
    )


def test_the_usages_corpus_of_a_quick_run_does_not_size_the_real_ones(tmp_path, monkeypatch):
    """A quick run's usages (senses.max_lemmas: 60) stay beside a run of 800 types: counted at 6.2 sentences a type,
    not as the quick run's table; a table made for as many types is its own count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from contextuality.workflow import run_need

    monkeypatch.chdir(tmp_path)
    _parquet(tmp_path / "results/corpora/usages/sentences.parquet", 370)
    usages = tmp_path / "results/senses/usages.parquet"
    usages.parent.mkdir(parents=True)
    pq.write_table(pa.table({"lemma": [f"w{i}" for i in range(60)], "pos": ["n"] * 60}), usages)
    settings = _default_with_corpus()
    need = run_need.run_need(settings)
    expected = int(25088 * 11.4) + int(int(6.2 * 800) * 11.4)  # SmolLM2's rows: STS's and the usages'
    smollm2 = next(model for model in need.models if model.key == "smollm2")
    assert smollm2.disk_bytes == pytest.approx(expected * 31 * 576 * 2 * 1.002, rel=1e-6)
    assert run_need.usage_sentences(60) == 370


def test_a_text_corpus_of_short_lines_is_sized_by_its_words_not_stss(tmp_path, monkeypatch):
    """300,000 one-word lines store about 1.1 rows a line, not STS's 11.4 a sentence: 14 GB, not 140, so 30 GB free
    let it through (it was refused); 300,000 lines of 30 words do not fit."""
    from contextuality.workflow import run_need
    from contextuality.workflow.schema import ConfigError

    monkeypatch.chdir(tmp_path)
    short, long = tmp_path / "short.txt", tmp_path / "long.txt"
    short.write_text("word\n" * 300_000)
    long.write_text(" ".join(["word"] * 30) + "\n" * 1 + (" ".join(["word"] * 30) + "\n") * 299_999)
    fits = _default_with_corpus(senses=False, source="text", path=str(short))
    need = run_need.run_need(fits)
    assert 12e9 < need.disk_bytes < 16e9
    run_need.check_fits(fits, need, free=30 * 10**9)
    too_big = _default_with_corpus(senses=False, source="text", path=str(long))
    with pytest.raises(ConfigError, match="not enough disk for this run"):
        run_need.check_fits(too_big, run_need.run_need(too_big), free=30 * 10**9)
