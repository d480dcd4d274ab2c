"""Time the measurement step against the read-once floor and against the paper's per-word loops.

    python benchmarks/bench_metrics.py --embeddings results/embeddings/MODEL --cold
    python benchmarks/bench_metrics.py --synthetic      # a realistic fake model in a temporary folder

Measures, in one run:
  (a) the measurement step as the workflow runs it: ``contextuality.measure.layer_job.measure_layer`` on every layer
      (``--jobs`` layers at once, one process and one BLAS thread each, as ``snakemake --cores N`` runs the
      per-layer jobs; default: one per CPU; ``--jobs 1``: in this process, after one untimed layer on each
      backend), then ``combine_layers``. With the default config's settings:
      the geometry panel on (``--no-geometry`` to leave it out) and the post-processed variants
      ``--postprocess none,standardize,abtt``;
  (b) one sequential read of every layer file (``store.read_layer``: the shards read directly, every
      chunk's checksum verified; the floor for any read-once method), the median of ``--reads`` such
      reads (default 3; a cold read's time varies with the disk); and (b') the same read converted
      to the compute dtype, as every measure in float32 (or float64) must convert each stored value once;
  (c) the original code's approach: per word, at most 1,000 sampled ordered pairs with each vector read
      from the HDF5 dataset one at a time and a scipy cosine per pair, at every layer; and one sklearn
      TruncatedSVD fit per word per layer >= 1. (c) is timed on a random subset of words, stratified by
      occurrence count, and extrapolated to all words (each stratum's mean time times its size).
  (f) the floor of this exact method: with the same ``--jobs``, every layer read into the compute dtype as
      (a) reads it, its second moment (one X^T X over all rows: the exact MEV baseline) and every word's
      Gram (n <= d occurrences) or scatter matrix (n > d: its MEV), small words stacked by size as
      ``word_stats.word_stats`` stacks them. No eigen-solve, cosine sum, variant or panel: (f)/(b) is
      what those products alone cost in reads of the layer files.
(a) runs on each of ``--backends`` (default ``numpy,torch``), ``--repeats`` times each in alternating order
(means compared): numpy is the workflow's job; torch is the same code (``measure_rows``) on torch's CPU
backend, each layer read into memory as ``measure_layer`` reads it and passed as ``torch.from_numpy`` of
it, one torch and one BLAS thread (a device's path, run on the CPU). Printed: each layer's CPU seconds on
both, torch/numpy, and how far apart the two backends' tables are; the ratios below use the first backend's (a).
  (n) and (o), with ``--against-commit C``: this checkout's numpy ``measure_layer`` against commit C's (its
      ``src/`` from ``git archive``), each run on every layer, one layer after the other, in a fresh child
      process (``measure_layers.py``) with one thread, at least twice each in the order n o, o n.
Targets: (a) <= 3 x (b), and (a) at least 50 x faster than (c); (n)/(o) <= 1 (the host path no slower). ``--cold`` evicts the layer files and
their shards from the page cache before (a) and (b), so both include the disk reads. ``--original-words 0``
skips (c).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
from scipy.spatial.distance import cosine
from sklearn.decomposition import TruncatedSVD
from threadpoolctl import threadpool_limits

from floor import products  # the products floor (f), shared with bench_scaling.py
from measure_layers import layer_files  # the child of --against-commit

from contextuality.measure.combine import combine_layers
from contextuality.measure.engine.backend import COMPUTE_DTYPES
from contextuality.measure.layer_job import OccurrenceIndex, RowsInMemory, measure_layer, measure_rows
from contextuality.store.reader import LayerReader, mapped_sources, read_layer
from contextuality.workflow.schema import load_settings

PROJECT = Path(__file__).resolve().parents[1]
BACKENDS = ("numpy", "torch")


def make_synthetic_model(
    folder: Path, *, n_layers=7, n_sentences=25_000, mean_length=12, dim=384, n_words=5_000, seed=0
):
    """Write layer files and occurrences.parquet shaped like a small real model.

    Sentences have 4-20 units (mean about 12). About 80% of units are occurrences of words whose counts
    follow Zipf's law (rank r has weight 1/r); words with fewer than 5 occurrences are not indexed.
    Each word has a direction; upper layers add more context noise and a shared anisotropy direction.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 2 * mean_length - 3, size=n_sentences)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_rows = int(offsets[-1])
    weights = 1.0 / np.arange(1, n_words + 1)
    word_of_row = rng.choice(n_words, size=n_rows, p=weights / weights.sum())
    word_of_row[rng.random(n_rows) < 0.2] = -1
    counts = np.bincount(word_of_row[word_of_row >= 0], minlength=n_words)
    word_of_row[(word_of_row >= 0) & (counts[np.maximum(word_of_row, 0)] < 5)] = -1
    directions = rng.standard_normal((n_words + 1, dim), dtype=np.float32)
    common = rng.standard_normal(dim, dtype=np.float32)
    for layer in range(n_layers):
        noise = rng.standard_normal((n_rows, dim), dtype=np.float32)
        vectors = directions[word_of_row] + (0.3 + 0.3 * layer) * noise + 0.5 * layer * common
        with h5py.File(folder / f"layer_{layer}.h5", "w") as f:
            f.create_dataset("vectors", data=vectors.astype(np.float16))
            f.create_dataset("sentence_offsets", data=offsets)
            f.attrs.update({"model": "synthetic", "layer": layer, "n_layers": n_layers, "dim": dim, "complete": 1})
    rows = np.flatnonzero(word_of_row >= 0)
    sentence_of_row = np.repeat(np.arange(n_sentences), lengths)
    occurrences = pd.DataFrame({
        "word": np.char.add("w", word_of_row[rows].astype(str)), "row": rows,
        "sentence_id": sentence_of_row[rows], "position": rows - offsets[sentence_of_row[rows]],
    }).sort_values(["word", "row"], ignore_index=True)  # fmt: skip
    occurrences.to_parquet(folder / "occurrences.parquet", index=False)


def stored_files(paths: dict[int, Path]) -> list[Path]:
    """Every file holding the layers' vectors: the layer files and the shards their virtual datasets map."""
    files = set(paths.values())
    for path in paths.values():
        with h5py.File(path, "r") as f:
            if f["vectors"].is_virtual:  # the shards, from the virtual dataset's own mapping (as the reader reads it)
                files |= {source["file"] for source in mapped_sources(path, f["vectors"])}
    return sorted(files)


def evict_from_page_cache(paths: dict[int, Path]) -> None:
    """Ask the kernel to drop the cached pages of the layer files and their shards, so the next read is from disk."""
    for path in stored_files(paths):
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def time_sequential_read(paths: dict[int, Path], dtype=None) -> float:
    """Every layer read whole, one after the other, as the measurement reads it (``store.read_layer``:
    shards read directly, every chunk's checksum verified), in the stored dtype or in ``dtype``."""
    started = time.perf_counter()
    for layer in sorted(paths):
        read_layer(paths[layer], dtype)
    return time.perf_counter() - started


def _products_one(args):
    """The BLAS products of one layer that the exact measures are built on, and nothing else (``time_products``)."""
    path, rows, group_starts, dtype = args
    with threadpool_limits(limits=1):  # one BLAS thread per layer, as measure_layer runs
        return _products(path, rows, group_starts, dtype)


def _products(path, rows, group_starts, dtype) -> float:
    started = time.process_time()
    X, _ = read_layer(path, dtype)
    products(X, rows, group_starts)
    return time.process_time() - started


def time_products(paths: dict[int, Path], occurrences: pd.DataFrame, *, jobs: int, dtype) -> tuple[float, float]:
    """Wall and CPU seconds of the floor of this exact method: every layer read into ``dtype`` as (a) reads
    it, its second moment (one X^T X over all rows, for the exact MEV baseline) and each word's Gram or
    scatter matrix (its MEV), ``jobs`` layers at once. No eigen-solve, cosine, variant or panel."""
    started = time.perf_counter()
    index = OccurrenceIndex(occurrences)
    work = [(paths[layer], index.rows, index.group_starts, dtype) for layer in sorted(paths)]
    cpu = _each_layer(_products_one, work, jobs)
    return time.perf_counter() - started, sum(cpu)


def _each_layer(function, work: list, jobs: int) -> list:
    """``function`` on every layer's item of ``work``, ``jobs`` processes at once (as snakemake --cores N)."""
    if jobs == 1:
        return [function(item) for item in work]
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(function, work))


def measure_layer_torch(path: Path, layer: int, index: OccurrenceIndex, settings, *, units):
    """``measure_layer`` on torch's CPU backend: the layer read into memory as ``measure_layer`` reads it (the
    compute dtype, or the stored one where that is wider), then ``measure_rows`` on ``torch.from_numpy`` of
    it (no copy), one torch thread and one BLAS thread (the host's eigen-solves and seeded draws)."""
    import torch

    torch.set_num_threads(1)
    work = np.dtype(COMPUTE_DTYPES[settings.compute_dtype])
    with LayerReader(path) as reader, threadpool_limits(limits=1):
        read_dtype = reader.dtype if work.itemsize < reader.dtype.itemsize else work
        rows = RowsInMemory(torch.from_numpy(reader.rows(dtype=read_dtype)), reader.offsets, path=path,
                            stored_dtype=reader.dtype, after_final_norm=int(reader.handle.attrs.get("after_final_norm", 0)))  # fmt: skip
        return measure_rows(rows, layer, index, settings, model="bench", units=units)


def _measure_one(args):
    path, layer, index, units, settings, backend = args
    started = time.process_time()
    if backend == "numpy":  # the workflow's job
        result = measure_layer(path, layer, index, settings.measure, model="bench", units=units)
    else:
        result = measure_layer_torch(path, layer, index, settings.measure, units=units)
    return result, time.process_time() - started


def time_pipeline(
    paths: dict[int, Path],
    occurrences: pd.DataFrame,
    units: pd.DataFrame | None,
    out: Path,
    *,
    jobs: int,
    settings,
    backend: str = "numpy",
) -> tuple[float, list[float], list]:
    """Wall seconds of the measurement step (``jobs`` layers at once), each layer's CPU seconds (read and
    measures: its process's, one thread) and the layers' results, on ``backend`` (numpy: ``measure_layer``,
    the workflow's job; torch: ``measure_layer_torch``).

    ``settings``: the run's ``MetricsSettings`` (the measurement's, and ``top_k_words``)."""
    started = time.perf_counter()
    index = OccurrenceIndex(occurrences)
    work = [(paths[layer], layer, index, units, settings, backend) for layer in sorted(paths)]
    done = _each_layer(_measure_one, work, jobs)
    out.mkdir(parents=True, exist_ok=True)
    combine_layers([r for r, _ in done], out / "words.parquet", out / "layers.parquet",
                   out / "context_specific_words.csv", top_k=settings.top_k_words,
                   out_postprocess=out / "postprocess.csv", out_rogue=out / "rogue.csv")  # fmt: skip
    return time.perf_counter() - started, [cpu for _, cpu in done], [r for r, _ in done]


def largest_difference(results: list, others: list) -> tuple[float, str]:
    """The largest absolute difference between two runs' numeric layer columns (NaN in both: equal; in one:
    infinite), and where: how far the backends' tables are apart."""
    worst, where = 0.0, "-"
    for a, b in zip(results, others):
        for column, value in a.row.items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                x, y = float(value), float(b.row[column])
                gap = 0.0 if np.isnan(x) and np.isnan(y) else np.inf if np.isnan(x) or np.isnan(y) else abs(x - y)
                if gap > worst:
                    worst, where = gap, f"layer {a.row['layer']} {column}"
    return worst, where


# --------------------------------------------------------------------------------------------------
# --against-commit: this checkout's measure_layer against another commit's, each in a fresh child


def export_source(commit: str, folder: Path) -> Path:
    """``src/`` of ``commit`` (git archive of this repository) unpacked into ``folder``, with ``workflow/`` (the
    config schema the package links to); the path of its ``src``."""
    archive = subprocess.run(["git", "-C", str(PROJECT), "archive", "--format=tar", commit, "src", "workflow"],
                             capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src"


def measure_in_child(src: Path, folder: Path, metrics: dict) -> dict:
    """``measure_layers.py`` on ``folder`` in a fresh interpreter importing the package from ``src``, one BLAS
    and OpenMP thread; refuses a child that imported the package from anywhere else."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
           **{name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}  # fmt: skip
    script = Path(__file__).resolve().with_name("measure_layers.py")
    done = subprocess.run([sys.executable, str(script), str(folder), "--metrics", json.dumps(metrics)], env=env,
                          stdout=subprocess.PIPE, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(
            f"measure_layers.py failed with the package of {src} (exit {done.returncode}); its stderr is above"
        )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(found["package"]) != (src / "contextuality").resolve():
        raise RuntimeError(f"the child imported contextuality from {found['package']}, not from {src}")
    return found


def time_against(folder: Path, metrics: dict, commit: str, scratch: Path, rounds: int) -> dict[str, list[dict]]:
    """Each layer's ``measure_layer`` with this checkout's package and with ``commit``'s, ``rounds`` times each
    in the order a b, b a, a b, ... (a drifting machine slows both alike); every child's layers."""
    sources = {"this checkout": PROJECT / "src", commit: export_source(commit, scratch / "against")}
    runs = {name: [] for name in sources}
    for number in range(rounds):
        for name in list(sources) if number % 2 == 0 else list(sources)[::-1]:
            runs[name].append(measure_in_child(sources[name], folder, metrics)["layers"])
    return runs


def original_word(datasets: list, rows: list[int], n_pairs: int = 1000) -> None:
    """The paper's per-word work (analyze.py): sampled pairs and scipy cosines per layer, one SVD per layer >= 1.

    Vectors are read from the HDF5 dataset one at a time, as the original does. The pairs are drawn
    without listing all n(n-1) of them first (the original lists them, which is slower still and
    needs tens of GB for the most frequent words), so (c) errs in the original's favour.
    """
    n = len(rows)
    flat = random.sample(range(n * (n - 1)), n_pairs) if n * (n - 1) > n_pairs else range(n * (n - 1))
    pairs = [(k // (n - 1), k % (n - 1) + (k % (n - 1) >= k // (n - 1))) for k in flat]
    for dataset in datasets:
        similarities = [
            1 - cosine(dataset[rows[i]].astype(np.float32), dataset[rows[j]].astype(np.float32)) for i, j in pairs
        ]
        np.nanmean(similarities)
    for dataset in datasets[1:]:
        embeddings = [dataset[row].astype(np.float32).tolist() for row in rows]
        components = min(100, min(len(rows), dataset.shape[1]) - 1)
        TruncatedSVD(n_components=components).fit(embeddings).explained_variance_ratio_[0]


def time_original(paths: dict[int, Path], occurrences: pd.DataFrame, n_words: int, seed: int) -> tuple[float, int, int]:
    """Seconds for the original approach on all words, estimated from about ``n_words`` of them.

    Words are split into strata by occurrence count (powers of two), the same number is timed in each
    (all of a stratum when it is smaller), and each stratum's mean time is multiplied by its size: the
    cost grows steeply with the count, so a plain random subset of a Zipf vocabulary would mostly miss
    the few frequent words that dominate the total.
    """
    rows_of_word = occurrences.groupby("word", sort=True)["row"].apply(list)
    strata = np.floor(np.log2(rows_of_word.map(len))).astype(int)
    per_stratum = max(1, n_words // strata.nunique())
    random.seed(seed)
    files = [h5py.File(paths[layer], "r") for layer in sorted(paths)]
    total, timed = 0.0, 0
    try:
        datasets = [f["vectors"] for f in files]
        for stratum in sorted(strata.unique()):
            members = list(rows_of_word.index[strata == stratum])
            chosen = random.sample(members, min(per_stratum, len(members)))
            started = time.perf_counter()
            for word in chosen:
                original_word(datasets, rows_of_word[word])
            total += (time.perf_counter() - started) / len(chosen) * len(members)
            timed += len(chosen)
    finally:
        for f in files:
            f.close()
    return total, timed, len(rows_of_word)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--embeddings", type=Path, help="a model folder: results/embeddings/MODEL (layers/ and occurrences.parquet)"
    )
    source.add_argument("--synthetic", action="store_true", help="generate a realistic model in a temporary folder")
    parser.add_argument(
        "--synthetic-sentences", type=int, default=25_000, help="sentences of the synthetic model (about 12 rows each)"
    )
    parser.add_argument("--synthetic-layers", type=int, default=7, help="layers of the synthetic model")
    parser.add_argument("--original-words", type=int, default=40, help="words timed for (c) before extrapolating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cold", action="store_true", help="evict the layer files from the page cache before (a) and (b)"
    )
    parser.add_argument("--reads", type=int, default=3, help="reads timed for (b) and (b'); their median is printed")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count(), help="layers measured at once in (a) (snakemake --cores)"
    )
    parser.add_argument("--backends", default=",".join(BACKENDS), help="(a) on these backends, comma-separated (numpy: "
                        "the workflow's job; torch: the same code on torch's CPU backend); the first one's (a) is the ratios'")  # fmt: skip
    parser.add_argument(
        "--repeats", type=int, default=1, help="(a) on each backend this often, alternating the order; means compared"
    )
    parser.add_argument("--against-commit", metavar="COMMIT", help="also time this checkout's measure_layer against COMMIT's "
                        "(git archive of its src/), each in a fresh child, one thread, at least twice in the order a b b a")  # fmt: skip
    parser.add_argument("--no-geometry", action="store_true", help="leave the geometry panel out of (a)")
    parser.add_argument(
        "--postprocess", default="none,standardize,abtt", help="post-processing variants measured in (a)"
    )
    parser.add_argument("--compute-dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    if not backends or set(backends) - set(BACKENDS) or len(set(backends)) < len(backends):
        parser.error(f"--backends: some of {', '.join(BACKENDS)}, each once; got {args.backends!r}")
    if "torch" in backends:
        import torch  # here, before any worker is forked: no job's time includes importing torch

        torch.set_num_threads(1)
    metrics = {
        "geometry": not args.no_geometry,
        "postprocess": args.postprocess.split(","),
        "compute_dtype": args.compute_dtype,
    }
    settings = load_settings({"models": {}, "seed": 0, "metrics": metrics}).metrics

    with tempfile.TemporaryDirectory(prefix="bench_metrics_") as scratch:
        scratch = Path(scratch)
        folder = args.embeddings
        if args.synthetic:
            folder = scratch / "model"
            folder.mkdir()
            started = time.perf_counter()
            make_synthetic_model(
                folder, n_layers=args.synthetic_layers, n_sentences=args.synthetic_sentences, seed=args.seed
            )
            print(f"synthetic model written in {time.perf_counter() - started:.1f} s")
        paths = layer_files(folder)
        occurrences = pd.read_parquet(folder / "occurrences.parquet")
        units = None
        if (folder / "units.parquet").exists() and settings.measure.geometry:
            units = pd.read_parquet(folder / "units.parquet", columns=["row", "unit", "position"])
        with h5py.File(paths[min(paths)], "r") as f:
            shape, dtype = f["vectors"].shape, f["vectors"].dtype
        print(f"{folder}: {len(paths)} layers, {shape[0]} rows x {shape[1]} ({dtype}), "
              f"{occurrences['word'].nunique()} words, {len(occurrences)} occurrences")  # fmt: skip

        # the read floor is the median of --reads reads (a cold read's time varies with the disk by up to 1.7x)
        reads, reads_converted = [], []
        for _ in range(args.reads):
            if args.cold:
                evict_from_page_cache(paths)
            reads.append(time_sequential_read(paths))
            if args.cold:
                evict_from_page_cache(paths)
            reads_converted.append(time_sequential_read(paths, args.compute_dtype))
        read, read_converted = float(np.median(reads)), float(np.median(reads_converted))
        # (a) on each backend, --repeats times, in the order n t, t n, n t, ...; in this process (--jobs 1), after
        # one untimed layer on each backend, so that neither pays alone for the process's first calls
        walls, cpus, results = {b: [] for b in backends}, {b: [] for b in backends}, {}
        if args.jobs == 1:
            index = OccurrenceIndex(occurrences)
            for backend in backends:
                _measure_one((paths[min(paths)], min(paths), index, units, settings, backend))
        for repeat in range(args.repeats):
            for backend in backends if repeat % 2 == 0 else backends[::-1]:
                if args.cold:
                    evict_from_page_cache(paths)
                wall, cpu, results[backend] = time_pipeline(paths, occurrences, units, scratch / "metrics" / backend,
                                                            jobs=args.jobs, settings=settings, backend=backend)  # fmt: skip
                walls[backend].append(wall)
                cpus[backend].append(cpu)
        if args.cold:
            evict_from_page_cache(paths)
        products, products_cpu = time_products(paths, occurrences, jobs=args.jobs, dtype=args.compute_dtype)
        original = timed_words = all_words = None
        if args.original_words > 0:
            original, timed_words, all_words = time_original(paths, occurrences, args.original_words, args.seed)
        against = (
            time_against(folder, metrics, args.against_commit, scratch, max(2, args.repeats))
            if args.against_commit
            else None
        )

    spread = lambda times: ", ".join(f"{t:.2f}" for t in times)  # noqa: E731
    mean_wall = {b: float(np.mean(walls[b])) for b in backends}
    layer_cpu = {b: np.mean(cpus[b], axis=0) for b in backends}  # per layer, the mean over the repeats
    what = (f"geometry {'on' if settings.measure.geometry else 'off'}, postprocess {','.join(settings.measure.postprocess)}, "
            f"{settings.measure.compute_dtype}")  # fmt: skip
    for backend in backends:
        label = {"numpy": "(a) measurement step, all layers:    ", "torch": "(a) on torch's CPU backend:          "}[
            backend
        ]
        print(f"{label} {mean_wall[backend]:9.2f} s  ({args.jobs} at once; {layer_cpu[backend].sum():.2f} CPU s "
              f"{'in measure_layer' if backend == 'numpy' else 'in the read and measure_rows on torch.from_numpy'}; "
              f"{what}{'; the mean of ' + spread(walls[backend]) if args.repeats > 1 else ''})")  # fmt: skip
    pipeline = mean_wall[backends[0]]
    print(
        f"(b) sequential read of layer files:   {read:9.2f} s  (median of {spread(reads)}; "
        f"{'cold: evicted from the page cache first' if args.cold else 'warm page cache'})"
    )
    print(
        f"(b') the same read into {args.compute_dtype}:   {read_converted:9.2f} s  (median of {spread(reads_converted)}; every "
        f"{args.compute_dtype} measure converts each stored value once; numpy converts float16 at about 3 ns a value)"
    )
    print(
        f"(f) the products alone:               {products:9.2f} s  ({args.jobs} at once; {products_cpu:.2f} CPU s: each layer "
        f"read into {args.compute_dtype}, its X^T X and every word's Gram or scatter matrix; nothing else)"
    )
    if len(backends) > 1:
        print("per layer, CPU s (read and measures, one thread): "
              + "; ".join(f"{layer}: numpy {n:.2f}, torch {t:.2f}" for layer, n, t in
                          zip(sorted(paths), layer_cpu["numpy"], layer_cpu["torch"])))  # fmt: skip
        gap, where = largest_difference(results["numpy"], results["torch"])
        print(f"(a) torch/numpy = {mean_wall['torch'] / mean_wall['numpy']:.2f}  (wall; CPU "
              f"{layer_cpu['torch'].sum() / layer_cpu['numpy'].sum():.2f}, per layer "
              f"{spread(layer_cpu['torch'] / layer_cpu['numpy'])}; the tables' largest difference {gap:.2g} at {where})")  # fmt: skip
    print(f"(a)/(b) = {pipeline / read:.2f}  (target <= 3)")
    print(f"(a)/(b') = {pipeline / read_converted:.2f}")
    print(f"(f)/(b) = {products / read:.2f}  (what the BLAS products of the exact measures alone cost, in reads)")
    print(f"(a)/(f) = {pipeline / products:.2f}")
    if original is not None:
        print(
            f"(c) original per-word loops:          {original:9.2f} s  (extrapolated from {timed_words} of {all_words} words, stratified by count)"
        )
        print(f"(c)/(a) = {original / pipeline:.1f}  (target >= 50)")
    if against is not None:
        this, other = against["this checkout"], against[args.against_commit]
        total = lambda key: {name: [sum(layer[key] for layer in run) for run in runs] for name, runs in against.items()}  # noqa: E731
        wall, cpu = total("wall_s"), total("cpu_s")
        print(f"(n) numpy measure_layer, this checkout: {np.mean(wall['this checkout']):7.2f} s  (one layer after the other, "
              f"a fresh process, one thread; the mean of {spread(wall['this checkout'])}; CPU {np.mean(cpu['this checkout']):.2f} s)")  # fmt: skip
        print(f"(o) the same at {args.against_commit}:{' ' * max(1, 22 - len(args.against_commit))}"
              f"{np.mean(wall[args.against_commit]):7.2f} s  (the mean of {spread(wall[args.against_commit])}; CPU "
              f"{np.mean(cpu[args.against_commit]):.2f} s; run in the order n o, o n, ...)")  # fmt: skip
        per_layer = lambda runs: np.mean([[layer["wall_s"] for layer in run] for run in runs], axis=0)  # noqa: E731
        print("per layer, s: " + "; ".join(f"{layer['layer']}: {n:.2f} against {o:.2f}" for layer, n, o in
                                           zip(this[0], per_layer(this), per_layer(other))))  # fmt: skip
        gap = max((abs(a[key] - b[key]) for a, b in zip(this[0], other[0]) for key in ("self_similarity", "intra_sentence", "mev")
                   if a[key] == a[key] or b[key] == b[key]), default=0.0)  # fmt: skip
        ratio = lambda times: np.mean(times["this checkout"]) / np.mean(times[args.against_commit])  # noqa: E731
        print(f"(n)/(o) = {ratio(wall):.2f}  (CPU {ratio(cpu):.2f}; target <= 1: the host path no slower; the layer means' "
              f"largest difference {gap:.2g})")  # fmt: skip


if __name__ == "__main__":
    main()
