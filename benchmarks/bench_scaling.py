"""How the measurement's cost grows with rows N and dimensions d, within a memory budget, against the cost model.

    python benchmarks/bench_scaling.py                  # d in {384, 768, 1536, 3072} at N = 300k; N in {75k, 300k, 1.2M} at d = 768
    python benchmarks/bench_scaling.py --quick          # d in {64, 128} at N = 20k; N in {20k, 40k} at d = 64 (the test's)
    python benchmarks/bench_scaling.py --budget-mb 4096 --folder /scratch --no-full

Each case writes a synthetic float16 model in the store's real format (``write_store``: two shards, the
layer file viewing them, manifest.json, units.parquet, occurrences.parquet) in a temporary folder, in
blocks, then measures in the same run:
  (a) ``measure_layer`` on the layer with the paper's measures (geometry off, post-processing ``none``,
      self-similarity ``exact``; every other setting the schema's default) and ``metrics.memory_mb =
      --budget-mb``, as the workflow's job runs it (manifest, scratch folder, one BLAS thread), in a fresh
      child process: its wall time and its peak RSS (the child's VmHWM);
  (a') the same with the default settings (geometry on, post-processing none,standardize,abtt; the
      units passed), unless ``--no-full``;
  (f) the products floor as ``bench_metrics.py`` defines it (``floor.products``: the layer read into
      float32, X^T X over all rows, every word's Gram or scatter matrix), here, one BLAS thread;
  and one thread's float32 syrk rate at d (X^T X of one block), the calibration of the cost model's time.
It prints a table, the fitted exponents of time in N (at the base d) and in d (at the base N), (a)/(f) and
(a')/(f) per case, and the cost model's (``cost_model.measure_cost``) peak memory, FLOPs and time (FLOPs at
the syrk rate + bytes at the read rate of (f)) beside the measured ones, flagging a case whose peak RSS
exceeds the model's or 1.1 x the budget, or whose time exceeds twice the model's or twice (f).
Targets: peak RSS <= 1.1 x budget at every N; time growing no faster than N^1.1 at fixed d; (a)/(f) <= 2 at
every d.

The synthetic layer: sentences of STS-like lengths (log-normal, median 11 units); words from a Zipf
vocabulary (``cost_model.expected_word_sizes``: one type per 15 rows, 15% punctuation, indexed from 5
occurrences), each word's vectors scattered around its own centre, a third of the words with a second
sense (40% of their occurrences around a second centre); a shared offset and three rogue dimensions
(large mean and spread). Seeded: the same seed writes the same bytes. Only layer 1 holds vectors
(layer 0's datasets exist, unwritten, and take no disk); 1.2M x 768 float16 is 1.8 GB on disk.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import h5py
import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
# benchmarks/ is not a package: its modules import each other from sys.path
from cost_model import MB, MIN_OCCURRENCES, ROWS_PER_TYPE, UNINDEXED_SHARE, measure_cost, zipf_weights  # noqa: E402
from floor import products, products_flops  # noqa: E402

from contextuality.core import layout  # noqa: E402
from contextuality.measure.engine.layer_pass import BLOCK_ROWS  # noqa: E402
from contextuality.measure.layer_job import OccurrenceIndex  # noqa: E402
from contextuality.store import provenance  # noqa: E402
from contextuality.store.files import chunk_rows, create_checked, layer_name  # noqa: E402
from contextuality.store.reader import read_layer  # noqa: E402
from contextuality.store.views import write_layer_file, write_manifest  # noqa: E402

log = logging.getLogger("bench_scaling")

FULL = {"d": (384, 768, 1536, 3072), "N": (75_000, 300_000, 1_200_000), "base_d": 768, "base_N": 300_000}
QUICK = {"d": (64, 128), "N": (20_000, 40_000), "base_d": 64, "base_N": 20_000}
# The quick budget is below the schema's minimum (600) on purpose: it puts the quick cases on both paths
# (the 20k x 64 layer fits, 20k x 128 and 40k x 64 are measured in chunks). It is set with
# dataclasses.replace, which the schema does not see.
FULL_BUDGET_MB, QUICK_BUDGET_MB = 2048, 520
PAPER_METRICS = {"geometry": False, "postprocess": ["none"], "self_similarity": "exact"}
# The structure of the synthetic layers (module doc)
SENTENCE_MEDIAN, SENTENCE_SIGMA, SENTENCE_MAX = 11.0, 0.55, 120
N_PUNCTUATION = 20
CENTRE_RANK = 64  # word centres lie in a 64-dim subspace (spread over every dimension by a random map)
SECOND_SENSE_SHARE = 0.4
OFFSET, OFFSET_SPREAD, NOISE = 1.0, 0.3, 0.8
ROGUE_MEAN, ROGUE_STD = (30.0, -20.0, 12.0), (8.0, 5.0, 3.0)
WRITE_ELEMENTS = 1 << 24  # values generated and written at a time (64 MB in float32): the writer's memory is bounded
N_SHARDS = 2
# Flags: the time model's and (a)/(f)'s allowance
SLOWER_THAN_MODEL = 2.0


class Store(NamedTuple):
    folder: Path
    layer: Path
    manifest: Path
    units: Path
    occurrences: Path
    n_rows: int
    d: int
    n_sentences: int
    sizes: np.ndarray  # the indexed words' occurrence counts


def sentence_lengths(rng: np.random.Generator, n_rows: int) -> np.ndarray:
    """Sentence lengths adding up to exactly ``n_rows`` (the last one cut)."""
    draw = lambda k: np.clip(np.rint(rng.lognormal(np.log(SENTENCE_MEDIAN), SENTENCE_SIGMA, k)), 1, SENTENCE_MAX)  # noqa: E731
    lengths = draw(n_rows // 8 + 16).astype(np.int64)
    while lengths.sum() < n_rows:
        lengths = np.concatenate([lengths, draw(len(lengths)).astype(np.int64)])
    ends = np.cumsum(lengths)
    last = int(np.searchsorted(ends, n_rows))
    lengths = lengths[: last + 1]
    lengths[-1] -= int(ends[last]) - n_rows
    return lengths


def write_store(folder: Path, n_rows: int, d: int, *, seed: int = 0, n_shards: int = N_SHARDS) -> Store:
    """A synthetic model of ``n_rows`` x ``d`` (module doc) written to ``folder`` in the store's format."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = np.random.default_rng([seed, 0, n_rows])  # sentences and words: the same at every d
    lengths = sentence_lengths(plan, n_rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_types = max(50, n_rows // ROWS_PER_TYPE)
    word = plan.choice(n_types, size=n_rows, p=zipf_weights(n_types)).astype(np.int64)
    punctuation = plan.random(n_rows) < UNINDEXED_SHARE
    word[punctuation] = n_types + plan.integers(0, N_PUNCTUATION, int(punctuation.sum()))
    second = (word < n_types) & (word % 3 == 1) & (plan.random(n_rows) < SECOND_SENSE_SHARE)

    space = np.random.default_rng([seed, 1, d])  # the geometry: centres, offset, rogue dimensions
    basis = (space.standard_normal((CENTRE_RANK, d)) / np.sqrt(CENTRE_RANK)).astype(np.float32)
    centres = space.standard_normal((2, n_types + N_PUNCTUATION, CENTRE_RANK)).astype(np.float32)
    offset = (OFFSET + OFFSET_SPREAD * space.standard_normal(d)).astype(np.float32)
    rogue = space.choice(d, size=len(ROGUE_MEAN), replace=False)
    rogue_scale = np.sqrt(max(d, 768) / 768)  # from d = 768 on, a similar share of the anisotropy at every d
    offset[rogue] = np.array(ROGUE_MEAN, dtype=np.float32) * rogue_scale
    spread = np.ones(d, dtype=np.float32)
    spread[rogue] = np.array(ROGUE_STD, dtype=np.float32) * rogue_scale

    names = np.array([f"w{i}" for i in range(n_types)] + [f"p{i}" for i in range(N_PUNCTUATION)], dtype=object)
    record = {"model": "synthetic", "seed": seed, "n_rows": n_rows, "dim": d, "storage_dtype": "float16"}
    bounds = np.linspace(0, len(lengths), n_shards + 1).astype(np.int64)
    shards = []
    with tqdm(total=n_rows, desc=f"writing {n_rows} x {d}", unit="row", disable=None, leave=False) as progress:
        for shard, (s0, s1) in enumerate(zip(bounds[:-1], bounds[1:])):
            first, last = int(offsets[s0]), int(offsets[s1])
            path = folder / "shards" / f"shard_{shard}.h5"  # the pipeline's {model}/shards/shard_{shard}.h5
            path.parent.mkdir(exist_ok=True)
            rows, chunk = last - first, chunk_rows(last - first)
            block_rows = max(1, WRITE_ELEMENTS // (d * chunk)) * chunk  # whole chunks: each checksummed once
            with h5py.File(path, "w") as f:
                create_checked(f, layer_name(0), (rows, d), np.float16)  # unwritten: no disk
                vectors = create_checked(f, layer_name(1), (rows, d), np.float16)
                for number, a in enumerate(range(0, rows, block_rows)):
                    b = min(a + block_rows, rows)
                    noise = np.random.default_rng([seed, 2, d, n_rows, shard, number])
                    w, s = word[first + a : first + b], second[first + a : first + b]
                    block = np.where(s[:, None], centres[1][w], centres[0][w]) @ basis
                    block += offset + spread * (NOISE * noise.standard_normal((b - a, d), dtype=np.float32))
                    vectors[a:b] = block.astype(np.float16)
                    progress.update(b - a)
                local = offsets[s0 : s1 + 1] - first
                create_checked(f, "sentence_offsets", local.shape, np.int64, data=local)
                ids = np.arange(s0, s1, dtype=np.int64)
                create_checked(f, "sentence_ids", ids.shape, np.int64, data=ids)
                f.attrs.update({"model": "synthetic", "n_layers": 2, "dim": d, "dtype": "float16", "shard": shard,
                                "n_shards": n_shards, "first_row": first, provenance.ATTRIBUTE: provenance.encode(record)})  # fmt: skip
                f.attrs["complete"] = 1
            shards.append(path)

    sentence = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    position = np.arange(n_rows, dtype=np.int64) - offsets[sentence]
    units = folder / "units.parquet"
    pd.DataFrame({"row": np.arange(n_rows, dtype=np.int64), "sentence_id": sentence, "position": position,
                  "unit": names[word]}).to_parquet(units, index=False)  # fmt: skip
    counts = np.bincount(word, minlength=len(names))
    indexed = np.flatnonzero((word < n_types) & (counts[word] >= MIN_OCCURRENCES))
    text_rank = np.argsort(np.argsort(names.astype(str), kind="stable"), kind="stable")
    indexed = indexed[np.lexsort((indexed, text_rank[word[indexed]]))]  # by word (text), then row: the contract's order
    occurrences = folder / "occurrences.parquet"
    pd.DataFrame({"word": names[word[indexed]], "row": indexed,
                  "sentence_id": sentence[indexed], "position": position[indexed]}).to_parquet(occurrences, index=False)  # fmt: skip
    manifest = folder / "manifest.json"
    written = write_manifest(shards, units, manifest, model="synthetic")
    layer = folder / layout.path(layout.LAYER_IN_EMBEDDINGS, layer=1)
    write_layer_file(shards, 1, layer, written, manifest)
    sizes = counts[:n_types][counts[:n_types] >= MIN_OCCURRENCES]
    return Store(folder, layer, manifest, units, occurrences, n_rows, d, len(lengths), np.sort(sizes)[::-1])


# --------------------------------------------------------------------------------------------------
# (a): measure_layer in a fresh process


def measure_settings(full: bool, budget_mb: int):
    """The paper's measures (or, ``full``, the default settings) with ``memory_mb = budget_mb`` where the
    settings have that field (before bounded memory they had not: the layer is then read whole)."""
    from contextuality.workflow.schema import load_settings

    settings = load_settings({"models": {}, "seed": 0, "metrics": {} if full else dict(PAPER_METRICS)}).metrics.measure
    if "memory_mb" in {field.name for field in dataclasses.fields(settings)}:
        settings = dataclasses.replace(settings, memory_mb=budget_mb)
    return settings


def child(spec: dict) -> dict:
    """One measurement job, as workflow/scripts/measure_layer.py runs it: the index, manifest and units read,
    ``measure_layer`` with one thread. Returns its times and this process's peak RSS (VmHWM)."""
    from contextuality.measure.layer_job import measure_layer, read_units
    from contextuality.store.reader import read_manifest

    settings = measure_settings(spec["full"], spec["budget_mb"])
    started = time.perf_counter()
    manifest = read_manifest(spec["manifest"])
    index = OccurrenceIndex.from_parquet(spec["occurrences"])
    units = read_units(spec["units"]) if settings.geometry else None
    read = time.perf_counter()
    scratch = {"scratch": Path(spec["scratch"])} if "scratch" in inspect.signature(measure_layer).parameters else {}
    result = measure_layer(Path(spec["layer"]), 1, index, settings, model="synthetic", manifest=manifest, units=units,
                           threads=1, **scratch)  # fmt: skip
    done = time.perf_counter()
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak into a child's ru_maxrss across exec
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    return {"index_s": read - started, "measure_s": done - read, "peak_mb": peak_kb * 1024 / MB,
            "n_words": int(result.row["n_words"]), "self_similarity": float(result.row["self_similarity"])}  # fmt: skip


def measure_in_child(store: Store, budget_mb: int, *, full: bool) -> dict:
    """(a) or (a'): ``child`` in a fresh interpreter with one BLAS and OpenMP thread."""
    spec = {"layer": str(store.layer), "manifest": str(store.manifest), "occurrences": str(store.occurrences),
            "units": str(store.units), "scratch": str(store.folder), "budget_mb": budget_mb, "full": full}  # fmt: skip
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, env={**os.environ, **threads}, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"measure_layer failed on {store.layer} (exit {done.returncode}); its stderr is above")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------
# (f), the syrk rate, the fits


def products_floor(store: Store) -> dict:
    """(f): the layer read into float32 and ``floor.products``, one BLAS thread; seconds of each part."""
    index = OccurrenceIndex.from_parquet(store.occurrences)
    with threadpool_limits(limits=1):
        started = time.perf_counter()
        X, _ = read_layer(store.layer, np.float32)
        read = time.perf_counter()
        products(X, index.rows, index.group_starts)
        done = time.perf_counter()
    return {"read_s": read - started, "products_s": done - read, "f_s": done - started,
            "flops": products_flops(store.n_rows, store.d, index.counts)}  # fmt: skip


def syrk_rate(d: int, seconds: float = 0.3) -> float:
    """Executed FLOP/s of one thread's float32 X^T X on a block of ``BLOCK_ROWS`` rows (the moments' product,
    which numpy runs as BLAS's syrk: N d^2 FLOPs, as the cost model counts them)."""
    Y = np.random.default_rng(0).standard_normal((BLOCK_ROWS, d), dtype=np.float32)
    with threadpool_limits(limits=1):
        Y.T @ Y  # warm-up
        reps, started = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - started < seconds:
            Y.T @ Y
            reps += 1
        elapsed = time.perf_counter() - started
    return reps * float(BLOCK_ROWS) * d * d / elapsed


def fitted_exponent(x, y) -> float:
    """Least-squares slope of log y on log x: the exponent b of y ~ x^b."""
    return float(np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)[0])


def cases(grid: dict) -> list[tuple[int, int]]:
    """(d, N): every d at the base N, every N at the base d (the shared case once)."""
    return sorted({(d, grid["base_N"]) for d in grid["d"]} | {(grid["base_d"], n) for n in grid["N"]})


# --------------------------------------------------------------------------------------------------
# The run


def run_case(root: Path, d: int, n_rows: int, budget_mb: int, *, seed: int, full: bool) -> dict:
    """One case: written, measured ((a), (a'), (f)), modelled, deleted."""
    folder = root / f"case_{d}x{n_rows}"
    started = time.perf_counter()
    store = write_store(folder, n_rows, d, seed=seed)
    written = time.perf_counter() - started
    log.info(
        "%d x %d written in %.1f s (%d words, %d sentences)", n_rows, d, written, len(store.sizes), store.n_sentences
    )
    try:
        paper = measure_in_child(store, budget_mb, full=False)
        default = measure_in_child(store, budget_mb, full=True) if full else None
        floor = products_floor(store)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rate = syrk_rate(d)
    model = measure_cost(n_rows, d, store.sizes, budget_mb)
    read_rate = n_rows * d * 2 / floor["read_s"]  # stored bytes per second, as (f) read them
    model_s = model["flops"] / rate + (model["bytes_read"] + model["bytes_written"]) / read_rate
    row = {
        "d": d, "N": n_rows, "words": len(store.sizes), "mode": "whole" if model["whole"] else "chunks",
        "a_s": paper["measure_s"], "f_s": floor["f_s"], "a/f": paper["measure_s"] / floor["f_s"],
        "a'_s": np.nan, "a'/f": np.nan, "peak_MB": paper["peak_mb"], "a'_peak_MB": np.nan,
        "model_peak_MB": model["peak_mb"], "peak/budget": paper["peak_mb"] / budget_mb,
        "model_GFLOP": model["flops"] / 1e9, "f_GFLOP": floor["flops"] / 1e9,
        "a_GFLOP/s": model["flops"] / 1e9 / paper["measure_s"], "syrk_GFLOP/s": rate / 1e9,
        "model_s": model_s, "a/model": paper["measure_s"] / model_s, "index_s": paper["index_s"], "write_s": written,
    }  # fmt: skip
    if default is not None:
        row.update({"a'_s": default["measure_s"], "a'/f": default["measure_s"] / floor["f_s"],
                    "a'_peak_MB": default["peak_mb"]})  # fmt: skip
    row["flags"] = flags(row, budget_mb)
    log.info("%d x %d: (a) %.2f s, (f) %.2f s, peak %.0f MB (model %.0f)", n_rows, d, row["a_s"], row["f_s"],
             row["peak_MB"], row["model_peak_MB"])  # fmt: skip
    return row


def flags(row: dict, budget_mb: int) -> str:
    """Where the measurement exceeds the model or a target."""
    found = []
    if row["peak_MB"] > row["model_peak_MB"]:
        found.append("peak>model")
    if max(row["peak_MB"], np.nan_to_num(row["a'_peak_MB"])) > 1.1 * budget_mb:
        found.append("peak>1.1budget")
    if row["a/model"] > SLOWER_THAN_MODEL:
        found.append("a>2model")
    if row["a/f"] > 2:
        found.append("a/f>2")
    return ",".join(found) or "-"


def summary(table: pd.DataFrame, grid: dict, budget_mb: int) -> list[str]:
    """The fitted exponents and the targets, one line each."""
    lines = []
    by_n = table[table["d"] == grid["base_d"]].sort_values("N")
    by_d = table[table["N"] == grid["base_N"]].sort_values("d")
    if len(by_n) >= 2:
        a, f = fitted_exponent(by_n["N"], by_n["a_s"]), fitted_exponent(by_n["N"], by_n["f_s"])
        lines.append(f"time ~ N^{a:.2f} at d = {grid['base_d']} ((f): N^{f:.2f}); target <= 1.1: "
                     f"{'met' if a <= 1.1 else 'MISSED'}")  # fmt: skip
    if len(by_d) >= 2:
        a, f = fitted_exponent(by_d["d"], by_d["a_s"]), fitted_exponent(by_d["d"], by_d["f_s"])
        lines.append(f"time ~ d^{a:.2f} at N = {grid['base_N']} ((f): d^{f:.2f})")
    peak = np.fmax(table["peak_MB"], table["a'_peak_MB"]).max() / budget_mb
    lines.append(
        f"peak RSS / budget: max {peak:.2f} over (a) and (a'); target <= 1.1: {'met' if peak <= 1.1 else 'MISSED'}"
    )
    worst = table["a/f"].max()
    lines.append(f"(a)/(f): max {worst:.2f} (paper's measures); target <= 2: {'met' if worst <= 2 else 'MISSED'}")
    if table["a'/f"].notna().any():
        worst_default = table["a'/f"].max()
        lines.append(f"(a')/(f): max {worst_default:.2f} (default settings; no target)")
    flagged = table[table["flags"] != "-"]
    lines.append(
        "flagged: " + ("none" if flagged.empty else "; ".join(f"{r.d}x{r.N} {r.flags}" for r in flagged.itertuples()))
    )
    return lines


COLUMNS = ["d", "N", "words", "mode", "a_s", "f_s", "a/f", "a'_s", "a'/f", "peak_MB", "a'_peak_MB", "model_peak_MB",
           "model_GFLOP", "a_GFLOP/s", "syrk_GFLOP/s", "model_s", "a/model", "flags"]  # fmt: skip


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (the test's): d in {64, 128}, N in {20k, 40k}"
    )
    parser.add_argument(
        "--budget-mb",
        type=int,
        default=None,
        help=f"metrics.memory_mb of every case (default {FULL_BUDGET_MB}; --quick {QUICK_BUDGET_MB})",
    )
    parser.add_argument(
        "--cases", default=None, help="only these cases, DxN comma-separated (e.g. 768x75000,768x300000)"
    )
    parser.add_argument("--no-full", action="store_true", help="leave out (a'), the default settings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, default=None, help="where the layers are written (default: the system's "
                        "temporary folder; the largest case needs about 2 GB)")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return pd.DataFrame()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("contextuality").setLevel(logging.WARNING)  # the store writer's lines, once per case
    grid = QUICK if args.quick else FULL
    budget = args.budget_mb or (QUICK_BUDGET_MB if args.quick else FULL_BUDGET_MB)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_scaling_", dir=args.folder) as root:
        chosen = (
            [tuple(int(v) for v in case.split("x")) for case in args.cases.split(",")] if args.cases else cases(grid)
        )
        for d, n_rows in chosen:
            rows.append(run_case(Path(root), d, n_rows, budget, seed=args.seed, full=not args.no_full))
    table = pd.DataFrame(rows)
    print(
        f"\nmetrics.memory_mb {budget}, one BLAS thread, float16 store, float32 work; (a) the paper's measures, "
        f"(a') the default settings, (f) the products floor; times in s, memory in MB (2^20 bytes)\n"
    )
    print(table[COLUMNS].to_markdown(index=False, floatfmt=".3g"))
    print()
    for line in summary(table, grid, budget):
        print(line)
    if args.quick:
        print(
            "(quick sizes: each job's fixed costs (bootstrap, sampled baselines, the small words' solves) dominate, "
            "which the cost model leaves out; the targets are for the full sizes)"
        )
    return table


if __name__ == "__main__":
    main()
