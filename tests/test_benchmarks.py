"""Every script in benchmarks/ run by its command line on tiny inputs, with the flags docs/benchmarks.md documents: a
shipped benchmark that no test runs rots. Each runs on the shared smoke run's outputs (its layer files,
corpus and models) or a tiny synthetic model, must exit 0 and print the rows and ratios it promises. The
numbers themselves mean nothing at these sizes. ``bench_scaling.py`` is run by tests/test_bench_scaling.py
(``--quick``); ``device_check`` runs here on torch's CPU backend with tiny models.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import PROJECT, run_command
from workflow_runs import failure, smoke_config_path

pytestmark = pytest.mark.slow

BENCHMARKS = PROJECT / "benchmarks"


def run(command: list, *, cwd=PROJECT, env=None, timeout: int = 300) -> str:
    """A benchmark's command line (``python`` is this interpreter, also for the shell scripts); its stdout."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    full_env = {**os.environ, "PATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    done = run_command(command, cwd=cwd, env=full_env, timeout=timeout)
    assert done.returncode == 0, failure(done)
    return done.stdout


def python(script: str, *args, **kwargs) -> str:
    return run([sys.executable, BENCHMARKS / script, *args], **kwargs)


def value(out: str, pattern: str) -> float:
    """The number ``pattern`` (a regular expression with one group) finds in ``out``."""
    found = re.search(pattern, out)
    assert found, f"{pattern!r} not in:\n{out}"
    return float(found.group(1))


def has_lines(out: str, *starts: str) -> None:
    lines = out.splitlines()
    for start in starts:
        assert any(line.startswith(start) for line in lines), f"no line starting {start!r} in:\n{out}"


def test_bench_metrics_on_the_smoke_layers_with_both_backends(smoke_run):
    """``--embeddings`` (the smoke run's tiny-gpt2: layer files viewing four shards) ``--cold`` (the shards
    found from the virtual datasets' mapping), both backends twice, alternating, and the original loops."""
    out = python("bench_metrics.py", "--embeddings", smoke_run / "results/embeddings/sts/tiny-gpt2", "--cold", "--reads", "1",
                 "--original-words", "3", "--backends", "numpy,torch", "--repeats", "2", "--jobs", "2")  # fmt: skip
    has_lines(out, "(a) measurement step, all layers:", "(a) on torch's CPU backend:", "(b) sequential read",
              "(b') the same read", "(f) the products alone", "per layer, CPU s", "(a) torch/numpy = ", "(a)/(b) = ",
              "(a)/(b') = ", "(f)/(b) = ", "(a)/(f) = ", "(c) original per-word loops", "(c)/(a) = ")  # fmt: skip
    assert "cold: evicted from the page cache first" in out
    assert len(re.findall(r"\d: numpy [\d.]+, torch [\d.]+", out)) == 4  # tiny-gpt2: layers 0-3
    assert value(out, r"(?:torch/numpy|\(a\)/\(b\)) = ([\d.]+)") > 0
    # the same code on both backends: the layers' tables agree (float32 work)
    assert value(out, r"largest difference ([-\d.e+]+|inf|nan)") < 1e-4


def test_bench_metrics_synthetic_torch_only_against_a_commit():
    """``--synthetic`` at a tiny size, the paper's measures only, torch alone, and ``--against-commit`` (HEAD:
    this checkout's package against the committed one, each in a fresh child, a b b a)."""
    if subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: --against-commit has no commit to export")
    out = python("bench_metrics.py", "--synthetic", "--synthetic-sentences", "150", "--synthetic-layers", "2",
                 "--no-geometry", "--postprocess", "none", "--backends", "torch", "--original-words", "0",
                 "--reads", "1", "--jobs", "1", "--against-commit", "HEAD")  # fmt: skip
    has_lines(out, "synthetic model written", "(a) on torch's CPU backend:", "(a)/(b) = ", "(n) numpy measure_layer",
              "(o) the same at HEAD:", "per layer, s: 0: ", "(n)/(o) = ")  # fmt: skip
    assert "geometry off, postprocess none" in out
    assert not any(
        line.startswith(("(a) measurement step", "(c) original", "(a) torch/numpy")) for line in out.splitlines()
    )
    assert value(out, r"\(n\)/\(o\) = ([\d.]+)") > 0
    assert len(re.findall(r"the mean of [\d.]+, [\d.]+;", out)) == 2  # each side twice


def test_bench_metrics_refuses_an_unknown_backend():
    done = subprocess.run([sys.executable, BENCHMARKS / "bench_metrics.py", "--synthetic", "--backends", "numpy,jax"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "--backends" in done.stderr


@pytest.mark.parametrize("model, flags", [
    ("tiny-gpt2", ["--naive-sentences", "5", "--repeats", "2"]),
    ("tiny-bert", ["--skip-naive", "--repeats", "1", "--max-batch-tokens", "256"]),
])  # fmt: skip
def test_bench_extract_on_the_smoke_models(smoke_run, model, flags):
    """The smoke config's model (its materialised folder), the smoke corpus, a few sentences; a tiny naive run
    (``(c)``), or ``--skip-naive``."""
    out = python("bench_extract.py", "--model", model, "--config", smoke_config_path(), "--model-dir",
                 smoke_run / "resources/models" / model, "--sentences", "24", "--threads", "1", *flags, cwd=smoke_run)  # fmt: skip
    has_lines(out, f"model {model}, 24 sentences", "(a) pipeline", "(b) forward only", "(c) naive, batch 1",
              "(d) all but the model", "    the plan job", "    plan job + shard job", "(e) raw h5py write",
              "(f) plain writes (dd)", "(a)/(b) = ", "(a)/(c) = ", "(d)     = ", "(d)/(e) = ", "(d)/(f) = ")  # fmt: skip
    assert value(out, r"\(a\)/\(b\) = ([\d.]+)") > 0 and value(out, r"\(d\)     = ([\d.]+)") > 0
    naive = value(out, r"\(c\) naive, batch 1 +([\d.]+|nan) tokens/s")
    assert np.isnan(naive) if "--skip-naive" in flags else naive > 0


def test_cost_model_prints_the_estimates_table():
    out = python("cost_model.py")
    assert out.startswith("cost model estimates")
    for model in ("bert-base", "gpt2", "8B-class"):
        assert len(re.findall(rf"^\| {re.escape(model)} +\| (STS|10 x STS) ", out, re.MULTILINE)) == 2, model


def test_the_products_floor_takes_every_route():
    """``floor.products`` (no command line): stacked small words, padded Grams and scatter matrices (n > d),
    on float32 rows; ``products_flops`` counts them (its arithmetic: tests/test_bench_scaling.py)."""
    sys.path.insert(0, str(BENCHMARKS))
    from floor import products, products_flops

    from contextuality.measure.engine.word_stats import STACK_MAX

    d = 16
    sizes = np.array([2, 2, 3, STACK_MAX, STACK_MAX + 1, 3 * d])  # stacked (<= STACK_MAX), Gram, scatter (> d)
    X = np.random.default_rng(0).standard_normal((int(sizes.sum()) + 10, d)).astype(np.float32)
    rows = np.random.default_rng(1).permutation(len(X))[: sizes.sum()]
    group_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    assert products(X, rows, group_starts) is None
    assert products_flops(len(X), d, sizes) == len(X) * d * d + np.sum(sizes * np.minimum(sizes, d) * d)


def test_gpu_check_on_the_cpu(smoke_run, tmp_path):
    """benchmarks/gpu_check.sh (and so gpu_check.py) with ``--device cpu``: a small random BERT
    (``--bert-size``) and, for SmolLM2, the smoke run's tiny GPT-2 configuration and tokenizer without
    weights (random weights of its configuration, as on a device machine without SmolLM2's weights)."""
    config = tmp_path / "config-only"
    config.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(smoke_run / "resources/models/tiny-gpt2/model" / name, config / name)
    out = run([BENCHMARKS / "gpu_check.sh", "--device", "cpu", "--check-sentences", "16", "--batch-size", "8",
               "--bert-size", "2x64", "--smollm2-dir", config, "--out", tmp_path / "gpu_check.json"],
              env={"SENTENCES": "32"})  # fmt: skip
    assert "torch " in out and ", CPU" in out and "SmolLM2: random weights of its configuration" in out
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [(r["model"], r["dtype"]) for r in results] == [
        ("bert-base-random", "float16"), ("bert-base-random", "bfloat16"), ("smollm2", "float16"), ("smollm2", "bfloat16")]  # fmt: skip
    for r in results:
        assert r["rows_below_floor"] == 0 and r["min_cosine"] >= 0.999 and r["a_tokens_per_s"] > 0, r
        assert r["rows_checked"] > 0


def test_device_check_on_the_cpu(tmp_path):
    """benchmarks/device_check.py, the GPU's prepared check, on torch's CPU backend with tiny models: every check
    it makes passes (tolerance against the numpy engine, reruns and group schedules byte for byte)."""
    out = tmp_path / "device_check.json"
    printed = python("device_check.py", "--device", "cpu", "--sentences", "80", "--shapes", "tiny", "--batch-size", "16",
                     "--max-batch-tokens", "2048", "--host-threads", "2", "--out", out, timeout=900)  # fmt: skip
    report = json.loads(out.read_text())
    assert {row["model"] for row in report["models"]} == {"bert-base", "smollm2"}
    assert all(
        row["rerun_identical"] and row["split_identical"] and row["split_groups"] == 2 for row in report["models"]
    )
    assert len(report["tolerance"]) == 8 and all(check["ok"] for check in report["tolerance"])
    assert {plan["gpu"] for plan in report["eight_b"]} == {"80 GB", "141 GB"}
    assert "8B-class on STS" in printed and "a_over_b" in printed


def test_self_similarity_check_on_the_smoke_store(smoke_run):
    """benchmarks/self_similarity_check.py on the smoke run's store: every word of every layer within 1e-5 of its
    float64 brute force, the engine's and the run's own tables."""
    printed = python("self_similarity_check.py", "--embeddings", smoke_run / "results/embeddings/sts/tiny-gpt2", "--metrics",
                     smoke_run / "results/metrics/sts/tiny-gpt2")  # fmt: skip
    assert "0 word-layers above 1e-05" in printed and "the run's tables: largest difference" in printed


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_bench_similarity_on_a_few_rows(backend):
    """benchmarks/bench_similarity.py on 600 rows and two layers per model: every stage's line, the total, the
    peak RSS and the load average."""
    check = ["--check"] if backend == "torch" else []  # the GPU check's comparison, here on torch's CPU backend
    out = python("bench_similarity.py", "--rows", "600", "--knn-rows", "200", "--layers", "2", "--draws", "2",
                 "--backend", backend, *check)  # fmt: skip
    if check:
        has_lines(out, "check [raw]: debiased CKA against numpy float64")
    has_lines(out, "synthetic layers: 600 rows", "[raw] (w1) within MiniLM:", "[unit_rows] (w1) within MiniLM:",
              f"stage total ({backend}, raw, unit_rows):", "peak RSS:", "load average before:")  # fmt: skip
    assert value(out, r"\(n\) nulls, 2 x 2 draws: +([\d.]+) s") >= 0


def test_compare_runs_on_the_smoke_run_and_itself(smoke_run):
    """benchmarks/compare_runs.py: a run against itself gives ratios of 1 for its wall time, disk and largest job."""
    out = python("compare_runs.py", smoke_run, smoke_run, "--names", "store", "device")
    has_lines(out, "load average now:", "wall time", "results/", "largest job", "largest jobs: store")
    assert value(out, r"wall time +([\d.]+) min") > 0
    assert re.search(r"largest job +[\d.]+ MB +[\d.]+ MB +1\.00", out), out
