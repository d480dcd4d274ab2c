"""How the measurement's cost grows with rows N and dimensions d, within a memory budget.

    python benchmarks/bench_scaling.py                 # d in {384, 768, 1536, 3072} at N = 300k; N in {75k, 300k, 1.2M} at d = 768
    python benchmarks/bench_scaling.py --quick         # small sizes (the test's)
    python benchmarks/bench_scaling.py --budget-mb 2048 --cases 768x300000,3072x300000

Each case writes a synthetic float16 layer in the store's plain form (sentences of 1-40 units, words with
Zipf frequencies clustered around their own centres, a third of them with two senses, two rogue
dimensions and a shared offset), then measures in the same run:
  (a) ``measure_layer`` with the paper's measures (geometry off, post-processing ``none``, exact
      self-similarity, the default bootstrap), in a fresh process with one BLAS thread and
      ``metrics.memory_mb = --budget-mb``: its wall time and peak RSS (the child's VmHWM);
  (f) the products floor, as ``bench_metrics.py`` defines it: the layer read into float32, X^T X over all
      rows and every word's Gram (n <= d) or scatter (n > d) matrix, one BLAS thread.
It prints a table, the fitted exponents of (a)'s time in N (at d = 768) and in d (at N = 300k), (a)/(f) per
case, and the cost model's predictions beside the measurements (``cost_model``), flagging a case whose
peak exceeds the model's or 1.1 x the budget. Targets: peak RSS <= 1.1 x budget at every N; time growing
no faster than N^1.1 at fixed d; (a)/(f) <= 2 at every d.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from bench_metrics import _products  # noqa: E402  (the floor, shared with bench_metrics)

from contextuality.measure.layer_job import OccurrenceIndex  # noqa: E402
from contextuality.measure.streaming import BASE_MB, SQUARE_MATRICES, plan_memory  # noqa: E402

FULL_CASES = [(384, 300_000), (768, 300_000), (1536, 300_000), (3072, 300_000), (768, 75_000), (768, 1_200_000)]
QUICK_CASES = [(32, 20_000), (64, 20_000), (64, 40_000), (64, 80_000), (256, 200_000)]  # the last in chunks
WRITE_ROWS = 50_000  # rows generated and written at a time: the writer's memory is bounded too


def write_layer(folder: Path, n_rows: int, d: int, seed: int = 0) -> tuple[Path, Path]:
    """A float16 layer of about ``n_rows`` rows x ``d`` and its occurrences.parquet (see the module doc)."""
    rng = np.random.default_rng([seed, n_rows, d])
    lengths = rng.integers(1, 41, size=n_rows // 20 + 1)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), n_rows)) + 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    offsets[-1] = n_rows  # the last sentence cut to the exact row count
    n_words = max(50, n_rows // 40)
    weights = 1.0 / np.arange(1, n_words + 1)
    word = rng.choice(n_words, size=n_rows, p=weights / weights.sum())
    word[rng.random(n_rows) < 0.2] = -1  # stopwords, punctuation: rows no word indexes
    sense = rng.random(n_rows) < np.where(np.arange(n_words) % 3 == 0, 0.4, 0.0)[np.maximum(word, 0)]
    centres = rng.standard_normal((n_words + 1, d)).astype(np.float32)
    second = rng.standard_normal((n_words + 1, d)).astype(np.float32)
    offset = 0.8 * rng.standard_normal(d).astype(np.float32)
    path = folder / f"layer_{d}x{n_rows}.h5"
    with h5py.File(path, "w") as f:
        vectors = f.create_dataset("vectors", shape=(n_rows, d), dtype=np.float16, chunks=(min(n_rows, 1024), d))
        for a in range(0, n_rows, WRITE_ROWS):
            b = min(a + WRITE_ROWS, n_rows)
            w, s = word[a:b], sense[a:b]
            block = np.where(s[:, None], second[w], centres[w]) + rng.standard_normal((b - a, d), dtype=np.float32)
            block += offset
            block[:, :2] += np.array([12.0, -8.0], dtype=np.float32)  # two rogue dimensions
            vectors[a:b] = block.astype(np.float16)
        f.create_dataset("sentence_offsets", data=offsets)
        f.attrs.update({"model": "synthetic", "layer": 1, "n_layers": 2, "dim": d, "complete": 1})
    rows = np.flatnonzero(word >= 0)
    counts = np.bincount(word[rows], minlength=n_words)
    rows = rows[counts[word[rows]] >= 5]
    occurrences = folder / f"occurrences_{d}x{n_rows}.parquet"
    pd.DataFrame({"word": np.char.add("w", word[rows].astype(str)), "row": rows}).to_parquet(occurrences)
    return path, occurrences


CHILD = textwrap.dedent("""
    import json, sys, time
    from threadpoolctl import threadpool_limits
    from contextuality.measure.layer_job import OccurrenceIndex, measure_layer
    from contextuality.workflow.schema import load_settings
    path, occurrences, budget, scratch = sys.argv[1:5]
    metrics = {"memory_mb": int(budget), "geometry": False, "postprocess": ["none"], "self_similarity": "exact"}
    settings = load_settings({"models": {}, "metrics": metrics}).metrics.measure
    started = time.perf_counter()
    index = OccurrenceIndex.from_parquet(occurrences)
    result = measure_layer(path, 1, index, settings, model="synthetic", threads=1, scratch=scratch)
    wall = time.perf_counter() - started
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak into a child's ru_maxrss across exec
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(json.dumps({"wall_s": wall, "peak_mb": peak_kb / 1024, "self_similarity": result.row["self_similarity"],
                      "n_words": int(result.row["n_words"])}))
""")


def measure_case(path: Path, occurrences: Path, budget_mb: int, scratch: Path) -> dict:
    """(a) in a fresh process: wall seconds, peak MB and two numbers of the result."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(occurrences), str(budget_mb), str(scratch)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"measure_layer failed on {path}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def products_floor(path: Path, occurrences: Path) -> float:
    """(f): CPU seconds of the products alone (``bench_metrics._products``), one BLAS thread."""
    index = OccurrenceIndex.from_parquet(occurrences)
    with threadpool_limits(limits=1):
        return _products(path, index.rows, index.group_starts, np.float32)


def word_sizes(occurrences: Path) -> np.ndarray:
    index = OccurrenceIndex.from_parquet(occurrences)
    return index.counts


def cost_model(n_rows: int, d: int, sizes: np.ndarray, budget_mb: int, work_bytes: int = 4,
               stored_bytes: int = 2) -> dict:  # fmt: skip
    """The measurement job's cost for one layer: FLOPs of its products, bytes read and written, peak MB.

    FLOPs: 2 N d^2 (X^T X, the exact MEV baseline and moments) + sum over words of 2 n min(n, d) d (each
    word's Gram or scatter matrix) + 4 N d (unit-row sums). Bytes: a layer that fits the budget is read
    once (N d stored bytes); a larger one twice for the paper's measures (the pass and, with variants, a
    second), and its indexed occurrences are written to the spill and read back (2 x occurrences x d
    stored bytes). Peak: ``BASE_MB`` + the d x d matrices + the layer in the work dtype, or the budget.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    flops = 2.0 * n_rows * d * d + float(np.sum(2.0 * sizes * np.minimum(sizes, d) * d)) + 4.0 * n_rows * d
    layer = n_rows * d * stored_bytes
    plan = plan_memory(n_rows, d, work_bytes, budget_mb)
    matrices_mb = SQUARE_MATRICES * d * d * 8 / 2**20
    if plan.whole:
        read, written = layer, 0
        peak = BASE_MB + matrices_mb + n_rows * d * work_bytes / 2**20
    else:
        spill = float(np.sum(sizes)) * d * stored_bytes
        read, written = layer + 2 * spill / 2, spill  # the pass reads the layer, the words read the spill back
        peak = float(budget_mb)
    return {"flops": flops, "bytes_read": read, "bytes_written": written, "peak_mb": peak, "whole": plan.whole}


def fitted_exponent(x, y) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def paper_estimates() -> pd.DataFrame:
    """The cost model on the paper's models and an 8B-class model, on STS and on ten times STS."""
    models = {"bert-base": (13, 768, 110e6), "gpt2": (13, 768, 124e6), "8B-class": (33, 4096, 8.0e9)}
    rows = []
    for corpus, tokens, n_rows in (("STS", 330_000, 309_000), ("10 x STS", 3_300_000, 3_090_000)):
        for name, (layers, d, params) in models.items():
            # word sizes of the STS index (Zipf-like): 6.2k words over 80% of the rows, scaled with the corpus
            sizes = np.full(6_221, 0.8 * n_rows / 6_221)
            model = cost_model(n_rows, d, sizes, 2048)
            rows.append({
                "model": name, "corpus": corpus, "extraction_TFLOP": 2 * params * tokens / 1e12,
                "store_GB": n_rows * layers * d * 2 / 1e9, "measure_TFLOP_per_layer": model["flops"] / 1e12,
                "measure_read_GB_per_layer": model["bytes_read"] / 1e9,
                "measure_spill_GB_per_layer": model["bytes_written"] / 1e9,
                "measure_peak_MB": model["peak_mb"], "in_memory": model["whole"],
            })  # fmt: skip
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for the test")
    parser.add_argument("--budget-mb", type=int, default=None, help="metrics.memory_mb (default 2048; --quick 600)")
    parser.add_argument("--cases", default=None, help="comma-separated DxN cases, e.g. 768x300000")
    parser.add_argument("--folder", type=Path, default=None, help="where the layers are written (default: a temporary folder)")
    args = parser.parse_args(argv)
    budget = args.budget_mb or (600 if args.quick else 2048)
    cases = QUICK_CASES if args.quick else FULL_CASES
    if args.cases:
        cases = [tuple(int(v) for v in case.split("x")) for case in args.cases.split(",")]
    results = []
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        folder = Path(tmp)
        for d, n_rows in cases:
            started = time.perf_counter()
            path, occurrences = write_layer(folder, n_rows, d)
            written = time.perf_counter() - started
            measured = measure_case(path, occurrences, budget, folder)
            floor = products_floor(path, occurrences)
            model = cost_model(n_rows, d, word_sizes(occurrences), budget)
            results.append({
                "d": d, "N": n_rows, "mode": "whole" if model["whole"] else "chunks", "a_s": measured["wall_s"],
                "f_s": floor, "a/f": measured["wall_s"] / floor, "peak_MB": measured["peak_mb"],
                "model_peak_MB": model["peak_mb"], "peak/budget": measured["peak_mb"] / budget,
                "GFLOP": model["flops"] / 1e9, "GFLOP/s(a)": model["flops"] / 1e9 / measured["wall_s"],
                "read_MB": model["bytes_read"] / 2**20, "spill_MB": model["bytes_written"] / 2**20,
                "words": measured["n_words"], "write_s": written,
            })  # fmt: skip
            print(pd.DataFrame(results[-1:]).to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
            path.unlink()
            occurrences.unlink()
    table = pd.DataFrame(results)
    print(f"\nbudget {budget} MB, one BLAS thread, paper's measures\n")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    base_d = 768 if not args.quick else 64
    base_n = 300_000 if not args.quick else 20_000
    by_n = table[table["d"] == base_d].sort_values("N")
    by_d = table[table["N"] == base_n].sort_values("d")
    if len(by_n) >= 2:
        print(f"time ~ N^{fitted_exponent(by_n['N'], by_n['a_s']):.2f} at d = {base_d} (target <= 1.1)")
    if len(by_d) >= 2:
        print(f"time ~ d^{fitted_exponent(by_d['d'], by_d['a_s']):.2f} at N = {base_n}")
    over = table[(table["peak_MB"] > 1.1 * budget) | (table["peak_MB"] > 1.1 * table["model_peak_MB"])]
    print(f"peak RSS / budget: max {table['peak/budget'].max():.2f} (target <= 1.1); over the model or budget: "
          f"{'none' if over.empty else ', '.join(f'{r.d}x{r.N}' for r in over.itertuples())}")
    print(f"(a)/(f): max {table['a/f'].max():.2f} (target <= 2)")
    if not args.quick:
        print("\ncost model estimates (per layer, metrics.memory_mb 2048)\n")
        print(paper_estimates().to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return table


if __name__ == "__main__":
    main()
