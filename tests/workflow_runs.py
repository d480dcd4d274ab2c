"""Workflow runs shared by the tests (each whole run happens once per test session).

The smoke config (two tiny random models, 120 sentences) runs through the real Snakemake command line
in a temporary directory, with the test hooks of ``tests/hooks/sitecustomize.py`` on PYTHONPATH. Tests take
the runs as the session fixtures of conftest.py (``smoke_run``, ``device_run``); a run that failed is not
started again by the next test that needs it: each gets the first failure. On pytest-xdist workers the session's
runs are shared too: the first worker to need one makes it, and a worker that needs it meanwhile waits for it
(``conftest.made_once``), so the two workers of CI's slow tier each make a different run at once.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from conftest import (
    MADE,
    PROJECT,
    _progress_mark,
    made_once,
    run_snakemake,
    snakemake_command,
    with_absolute_data_paths,
    write_config,
)

HOOKS = Path(__file__).resolve().parent / "hooks"
# The shared smoke run shows what a user's terminal of this width shows: the project's workflow profile (its logger)
TERMINAL_COLUMNS = 100
KILL_STALL_S = 300  # the killed run's stall limit (silent this long: stuck)


def smoke_config(**overrides) -> dict:
    config = with_absolute_data_paths(yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text()))
    for section, values in overrides.items():
        if isinstance(values, dict):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


def hook_env(**variables: str) -> dict:
    """Environment for a run with the test hooks (tests/hooks) loaded (PYTHONPATH) and the given hook variables."""
    path = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, **variables}


def failure(result) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"


def _checked(result) -> None:
    if result.returncode != 0:
        raise AssertionError(failure(result))


def audited_smoke_run(tmp_path_factory) -> Path:
    """The whole smoke pipeline, every file write and rename of every process recorded in audit/
    (the session fixture ``smoke_run``), through the terminal a user gets (profiles/default, TERMINAL_COLUMNS)."""

    def make() -> dict:
        workdir = tmp_path_factory.mktemp("guarantees-smoke")
        audit = tmp_path_factory.mktemp("guarantees-audit")
        config = write_config(tmp_path_factory.mktemp("guarantees-config") / "smoke.yaml", smoke_config())
        result = run_snakemake(
            workdir,
            "--cores",
            "2",
            "--workflow-profile",
            str(PROJECT / "profiles" / "default"),
            configfile=config,
            env={**hook_env(GUARANTEES_AUDIT_DIR=str(audit)), "COLUMNS": str(TERMINAL_COLUMNS)},
        )
        _checked(result)
        return {"workdir": workdir, "output": result.stdout + result.stderr, "audit": audit, "config": config}

    return made_once(tmp_path_factory, "smoke", make)["workdir"]


# The smoke config measured on the device (torch's CPU backend here), with no store: every layer, the sense measures'
# too, computed where the forward passes leave it
DEVICE_SMOKE = {"metrics": {"on_device": True, "device": "cpu"}, "extraction": {"store": False}}


def device_smoke_run(tmp_path_factory) -> Path:
    """The whole smoke pipeline with every layer measured where the forward passes leave it (``DEVICE_SMOKE``;
    the session fixture ``device_run``)."""

    def make() -> dict:
        workdir = tmp_path_factory.mktemp("guarantees-device")
        config = write_config(tmp_path_factory.mktemp("guarantees-device-config") / "smoke.yaml",
                              smoke_config(**DEVICE_SMOKE))  # fmt: skip
        _checked(run_snakemake(workdir, "--cores", "2", configfile=config))
        return {"workdir": workdir}

    return made_once(tmp_path_factory, "device", make)["workdir"]


def smoke_audit() -> list[dict]:
    records = []
    for path in sorted(MADE["smoke"]["audit"].glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def smoke_config_path() -> Path:
    return MADE["smoke"]["config"]


def smoke_output() -> str:
    """What the shared smoke run printed (stdout, then stderr)."""
    return MADE["smoke"]["output"]


# --------------------------------------------------------------------------------------------------
# A second run of the same config, killed in the middle of a shard and resumed

KILLED_MODEL = "tiny-gpt2"
KILLED_TARGETS = [
    f"results/embeddings/sts/{KILLED_MODEL}/manifest.json",
    f"results/metrics/sts/{KILLED_MODEL}/layers.csv",
    f"results/metrics/sts/{KILLED_MODEL}/context_specific_words.csv",
    f"results/metrics/sts/{KILLED_MODEL}/senses/layers.csv",
]


def _shard_snapshot(shards: Path) -> dict[str, tuple[int, int]]:
    return {path.name: (path.stat().st_mtime_ns, path.stat().st_ino) for path in shards.glob("shard_*")}


def _marked_incomplete(workdir: Path) -> set[str]:
    """The output paths Snakemake marks as incomplete in ``workdir`` (``.snakemake/incomplete/``: each path in
    url-safe base64, split into folders of at most 254 characters, continued parts prefixed with '@')."""
    root = workdir / ".snakemake" / "incomplete"
    marked = set()
    for record in root.rglob("*") if root.is_dir() else ():
        if record.is_file() and record.name != "migration_underway":
            parts = [part.removeprefix("@") for part in record.relative_to(root).parts]
            marked.add(base64.urlsafe_b64decode("".join(parts)).decode())
    return marked


def _kill_mid_shard(workdir: Path, config: Path) -> tuple[set[int], set[int]]:
    """Start the run with slowed extraction; SIGKILL Snakemake and its jobs once a shard is half written.

    Returns (shards finished before the kill, shards whose temporary file the kill left behind).
    """
    command = snakemake_command(workdir, *KILLED_TARGETS, "--cores", "2", "--configfile", str(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **hook_env(GUARANTEES_SLOW_EXTRACT="3")}
    shards = workdir / "results" / "embeddings" / "sts" / KILLED_MODEL / "shards"
    with open(workdir / "killed-run.out", "w") as out:
        run = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        # a stall limit as run_snakemake's: a loaded machine may take long to reach the shards, a stuck run never does
        mark, since, checked = _progress_mark(workdir, (out,)), time.monotonic(), time.monotonic()
        try:
            while run.poll() is None:
                if time.monotonic() - checked > 5:  # the mark walks the folder: every 5 s, not every 50 ms
                    checked = time.monotonic()
                    if (now := _progress_mark(workdir, (out,))) != mark:
                        mark, since = now, checked
                    elif checked - since > KILL_STALL_S:
                        raise TimeoutError(
                            f"the run to kill mid-shard in {workdir} printed nothing and wrote no file for "
                            f"{KILL_STALL_S} s: it stalled (a slow machine only makes it slower; this limit is "
                            f"KILL_STALL_S in tests/workflow_runs.py): {(workdir / 'killed-run.out').read_text()[-3000:]}"
                        )
                # temporaries first: a shard renamed in between then counts as finished, not as half written
                writing = (
                    {int(re.match(r"\.shard_(\d+)\.tmp-", p.name).group(1)) for p in shards.glob(".shard_*.tmp-*.h5")}
                    if shards.is_dir()
                    else set()
                )
                finished = {int(p.stem.split("_")[1]) for p in shards.glob("shard_*.h5")} if shards.is_dir() else set()
                if len(finished) >= 2 and writing - finished:
                    os.killpg(run.pid, signal.SIGKILL)  # as on a node crash or the OOM killer
                    run.wait()
                    # a shard renamed in place whose job Snakemake had not yet recorded as finished (a loaded
                    # machine widens that window) is still marked incomplete, and --rerun-incomplete redoes it
                    marked = _marked_incomplete(workdir)
                    done = {shard for shard in finished
                            if str((shards / f"shard_{shard}.h5").relative_to(workdir)) not in marked}  # fmt: skip
                    return done, (writing - finished) | (finished - done)
                time.sleep(0.05)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    raise AssertionError(f"never saw a shard half written: {(workdir / 'killed-run.out').read_text()[-3000:]}")


def interrupted_run(tmp_path_factory) -> dict:
    """The smoke config again in a fresh directory (tiny-gpt2 up to its metrics), SIGKILLed mid-shard,
    then ``snakemake --unlock`` and ``--rerun-incomplete``. Also the second run of the determinism tests."""

    def make() -> dict:
        reference = audited_smoke_run(tmp_path_factory)
        config = smoke_config_path()
        workdir = tmp_path_factory.mktemp("guarantees-interrupted")
        finished, half_written = _kill_mid_shard(workdir, config)
        shards = workdir / "results" / "embeddings" / "sts" / KILLED_MODEL / "shards"
        before = _shard_snapshot(shards)
        leftovers = sorted(path.name for path in shards.glob(".shard_*.tmp-*.h5"))
        _checked(run_snakemake(workdir, *KILLED_TARGETS, "--unlock", configfile=config))
        rerun = run_snakemake(workdir, *KILLED_TARGETS, "--cores", "2", "--rerun-incomplete", configfile=config)
        _checked(rerun)
        return {
            "workdir": workdir,
            "reference": reference,
            "config": config,
            "finished": finished,
            "half_written": half_written,
            "leftovers": leftovers,
            "before": before,
            "after": _shard_snapshot(shards),
            "rerun": rerun.stdout + rerun.stderr,
        }

    return made_once(tmp_path_factory, "interrupted", make)


# --------------------------------------------------------------------------------------------------
# What `snakemake` builds by default, without starting it (contextuality.workflow.run_files.RunFiles.final)

# Each rule's outputs by the wildcards they carry (the files' names here are the rule's; RunFiles reads no name).
_WILDCARDS = {
    "figures": "", "summary": "", "report_pages": "", "table1": "", "wordnet": "", "sense_inventory": "",
    "sense_usages": "", "context_diversity": "", "tagger": "", "sense_tags": "", "senses_figures": "",
    "similarity_figures": "", "atlas": "", "corpus": "{corpus}", "words": "{corpus}", "sts_pairs": "{corpus}",
    "similarity_rows": "{corpus}", "static_baseline_scores": "{baseline}", "model_figures": "{model}",
    "static_scores": "{model}", "model_pages": "{corpus}/{model}", "measure_senses": "{corpus}/{model}",
    "plan": "{corpus}/{model}", "manifest": "{corpus}/{model}", "combine_layers": "{corpus}/{model}",
    "export_classic": "{corpus}/{model}", "similarity_sample": "{corpus}/{model}",
    "similarity_model": "{corpus}/{model}", "measure_model": "{corpus}/{model}/{part}",
    "device_layer": "{corpus}/{model}/{layer}", "measure_layer": "{corpus}/{model}/{layer}",
    "extract": "{corpus}/{model}/{shard}", "layer_file": "{corpus}/{model}/{layer}",
}  # fmt: skip
RULES = types.SimpleNamespace(
    **{name: types.SimpleNamespace(output=[f"{name}:{where}"]) for name, where in _WILDCARDS.items()}
)


def planned(config: dict) -> dict[str, list[str]]:
    """The wildcards of every file ``config``'s run builds by default, by the rule that writes it: a model whose
    layer count is in its config (random) has its layers' files, any other's wait for its build (a checkpoint)."""
    from snakemake.exceptions import IncompleteCheckpointException

    from contextuality.workflow.run_files import RunFiles
    from contextuality.workflow.schema import load_settings

    def unbuilt(model):
        raise IncompleteCheckpointException(None, None)

    by_rule: dict[str, list[str]] = {}
    for target in RunFiles(load_settings(config), built_record=unbuilt).final(RULES):
        name, _, where = target.partition(":")
        by_rule.setdefault(name, []).append(where)
    return by_rule


# computed by the same numpy code on rows drawn on the host: the same bytes on either path (not
# adjusted_self_similarity: the device's self-similarity, within the tolerance, less the host's baseline)
HOST_SAMPLED = ["baseline_cosine", "baseline_mev", "n_baseline_vectors", "norm_mean", "norm_std", "pc1_ratio",
                "effective_rank", "isoscore", "isoscore_star", "twonn_dimension", "twonn_duplicate_fraction",
                "geometry_sample", "n_sentences_sampled", "massive_dims", "massive_occurrences"]  # fmt: skip


def assert_same_layer_table(mine: pd.DataFrame, reference: pd.DataFrame, model: str) -> None:
    """Another path's layers.parquet against the reference one: the host-sampled and text columns byte for byte,
    every other number within 1e-5."""
    assert list(mine.columns) == list(reference.columns) and len(mine) == len(reference)
    for column in reference.columns:
        if column in HOST_SAMPLED or not pd.api.types.is_numeric_dtype(reference[column]):
            pd.testing.assert_series_equal(mine[column], reference[column], check_exact=True, obj=f"{model} {column}")
        else:
            np.testing.assert_allclose(mine[column], reference[column], atol=1e-5, rtol=0, err_msg=f"{model} {column}")
