"""Time the similarity engine (``contextuality.measure.similarity.measures``) on synthetic layers of the default study's shapes.

    python benchmarks/bench_similarity.py --rows 20000
    python benchmarks/bench_similarity.py --rows 20000 --backend torch

Builds float16 layers shaped like the default run's models over the same ``--rows`` rows: MiniLM (7 x 384) and
SmolLM2 (31 x 576), each layer a shared signal seen through its own map, plus its own noise; SmolLM2's layers
from 3 on carry one massive row per 17 (a value of 2,000 in one dimension: the attention sinks of section 5
of the spec). Then, for each variant of ``--variants`` (default raw and unit_rows), prints the time of:
  (w1) within MiniLM and (w2) within SmolLM2: CKA biased and debiased and the Procrustes angle of every pair
       ℓ <= m (``layer_grid``, ``--memory-mb`` for its accumulators);
  (x)  across, MiniLM x SmolLM2: the same for every (ℓ, m);
  (k)  mutual k-NN (k = ``--knn-k``) on the first ``--knn-rows`` rows: each of the 38 layers' neighbours once
       (``knn_indices``), then every within and across pair's overlap (``mutual_knn``);
  (n)  the permutation null: ``--draws`` draws for each MiniLM layer with its best SmolLM2 layer (by debiased CKA),
each after one untimed call on a few rows (the first calls' imports and thread pools). Then the stage's total
(the default run's similarity stage: both models within, the pair across, both variants, the nulls), the
process's peak RSS (``resource.getrusage``; it holds both models' layers, as the pair's job does) and the load
average before and after. Targets (the default run's budget): the stage <= 10 minutes on 2 idle cores, <= 2 GB
peak per job.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np

from contextuality.measure.similarity import measures as similarity

SHAPES = {"MiniLM": (7, 384), "SmolLM2": (31, 576)}
PRODUCT_MEASURES = ["cka_biased", "cka_debiased", "procrustes"]
SINK_EVERY = 17  # rows per sentence: the first carries the massive value


def synthetic_layers(n_rows: int, n_layers: int, dim: int, *, seed: int, massive_from: int | None = None):
    """``n_layers`` float16 layers of ``n_rows`` x ``dim``: a shared 32-dimensional signal (the same rows for every
    model) through each layer's own map, and noise; from layer ``massive_from`` on, every ``SINK_EVERY``-th
    row carries 2,000 in dimension 7."""
    signal = np.random.default_rng(0).standard_normal((n_rows, 32), dtype=np.float32)
    rng = np.random.default_rng(seed)
    layers = []
    for layer in range(n_layers):
        x = signal @ rng.standard_normal((32, dim), dtype=np.float32)
        x += rng.standard_normal((n_rows, dim), dtype=np.float32) * (1.0 + 0.1 * layer)
        if massive_from is not None and layer >= massive_from:
            x[::SINK_EVERY, 7] = 2000.0
        layers.append(x.astype(np.float16))
    return layers


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def knn_stage(models: dict, variant: str, k: int, knn_rows: int) -> tuple[float, int]:
    """Every layer's neighbours once, then every within and across pair's mutual k-NN: seconds, pairs."""
    started = time.perf_counter()
    neighbours = {name: [similarity.knn_indices(x[:knn_rows], k, variant=variant) for x in layers]
                  for name, layers in models.items()}  # fmt: skip
    mini, smol = neighbours["MiniLM"], neighbours["SmolLM2"]
    pairs = [(a, b) for ours in (mini, smol) for i, a in enumerate(ours) for b in ours[i:]]
    pairs += [(a, b) for a in mini for b in smol]
    for a, b in pairs:
        similarity.mutual_knn(a, b)
    return time.perf_counter() - started, len(pairs)


def null_stage(models: dict, across, variant: str, draws: int) -> float:
    """``draws`` permutations for each MiniLM layer with its best SmolLM2 layer (by debiased CKA)."""
    started = time.perf_counter()
    for ell, x in enumerate(models["MiniLM"]):
        best = int(np.nanargmax(across.cka_debiased[ell]))
        similarity.permutation_null(x, models["SmolLM2"][best], draws=draws, seed=ell, variant=variant)
    return time.perf_counter() - started


def check_against_numpy(models: dict, host: dict, variant: str) -> None:
    """The across grid of the first 2 layers of each model on the benchmark's backend (float32 products) against
    numpy's float64 on the same rows; fails (exit 1) beyond 1e-5 in debiased CKA."""
    ours = similarity.layer_grid(models["MiniLM"][:2], models["SmolLM2"][:2], variant=variant)
    reference = similarity.layer_grid(host["MiniLM"][:2], host["SmolLM2"][:2], variant=variant, compute_dtype="float64")
    worst = float(np.nanmax(np.abs(ours.cka_debiased - reference.cka_debiased)))
    print(f"check [{variant}]: debiased CKA against numpy float64 on 2 x 2 layers: max |difference| {worst:.2e} "
          f"(target <= 1e-5): {'ok' if worst <= 1e-5 else 'FAILED'}")  # fmt: skip
    if not worst <= 1e-5:
        raise SystemExit(1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="common rows of the sample (similarity.max_rows)")
    parser.add_argument("--knn-rows", type=int, default=5_000, help="rows of the k-NN sample (similarity.knn_rows)")
    parser.add_argument("--knn-k", type=int, default=10)
    parser.add_argument("--draws", type=int, default=20, help="permutations per null (similarity.null_draws)")
    parser.add_argument(
        "--variants", default="raw,unit_rows", help="comma-separated, of " + ", ".join(similarity.VARIANTS)
    )
    parser.add_argument("--memory-mb", type=float, default=1024, help="the engine's accumulators and chunks (the layers "
                        "beside them: 0.82 GB at 20,000 rows)")  # fmt: skip
    parser.add_argument("--backend", choices=["numpy", "torch"], default="numpy", help="torch: its CPU backend")
    parser.add_argument("--device", default=None, help="a torch device for the layers (cuda:0 on a GPU; implies torch)")
    parser.add_argument(
        "--check", action="store_true", help="also: the across grid of 2 x 2 layers against numpy float64"
    )
    parser.add_argument("--layers", type=int, default=None, help="fewer layers per model (a quick run)")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    if set(variants) - {"raw", "unit_rows", "standardize"}:
        parser.error(f"--variants: some of raw, unit_rows, standardize; got {args.variants!r}")
    load_before = os.getloadavg()
    started = time.perf_counter()
    models = {name: synthetic_layers(args.rows, min(n, args.layers or n), dim, seed=seed, massive_from=3 if name == "SmolLM2" else None)
              for seed, (name, (n, dim)) in enumerate(SHAPES.items(), start=1)}  # fmt: skip
    print(f"synthetic layers: {args.rows} rows, " + ", ".join(f"{name} {len(layers)} x {layers[0].shape[1]}" for name, layers in models.items())
          + f" (float16, {sum(x.nbytes for layers in models.values() for x in layers) / 2**30:.2f} GiB) in {time.perf_counter() - started:.1f} s")  # fmt: skip
    host = models
    if args.backend == "torch" or args.device:
        import torch

        args.backend = "torch"
        torch.backends.cuda.matmul.allow_tf32 = False  # as the device jobs: float32 products, not TF32
        device = args.device or "cpu"
        models = {name: [torch.from_numpy(x).to(device) for x in layers] for name, layers in models.items()}
        print(f"torch {torch.__version__} on {device}, {torch.get_num_threads()} CPU threads")
    grid = dict(measures=PRODUCT_MEASURES, memory_mb=args.memory_mb)
    warm = [x[:200, :64] for x in models["MiniLM"][:2]]  # untimed: the first calls' imports and thread pools
    similarity.layer_grid(warm, measures=[*PRODUCT_MEASURES, "mutual_knn"])
    similarity.permutation_null(warm[0], warm[1], draws=1, seed=0)
    total = 0.0
    for variant in variants:
        within_mini, _ = timed(similarity.layer_grid, models["MiniLM"], variant=variant, **grid)
        within_smol, _ = timed(similarity.layer_grid, models["SmolLM2"], variant=variant, **grid)
        across_time, across = timed(similarity.layer_grid, models["MiniLM"], models["SmolLM2"], variant=variant, **grid)
        knn_time, knn_pairs = knn_stage(models, variant, args.knn_k, args.knn_rows)
        null_time = null_stage(models, across, variant, args.draws)
        subtotal = within_mini + within_smol + across_time + knn_time + null_time
        total += subtotal
        print(f"[{variant}] (w1) within MiniLM: {within_mini:8.1f} s   (w2) within SmolLM2: {within_smol:8.1f} s   "
              f"(x) across: {across_time:8.1f} s   (k) mutual {args.knn_k}-NN, {sum(map(len, models.values()))} layers at "
              f"{args.knn_rows} rows, {knn_pairs} pairs: {knn_time:6.1f} s   (n) nulls, {len(models['MiniLM'])} x {args.draws} "
              f"draws: {null_time:6.1f} s   sum {subtotal:7.1f} s")  # fmt: skip
    if args.check:
        check_against_numpy(models, host, variants[0])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"stage total ({args.backend}, {', '.join(variants)}): {total:.1f} s ({total / 60:.2f} min; target <= 10 min on 2 idle cores)"
    )
    print(
        f"peak RSS: {peak_mb:.0f} MB (both models' layers held; target <= 2,048 MB per job; --memory-mb {args.memory_mb:g})"
    )
    print(f"load average before: {' '.join(f'{v:.2f}' for v in load_before)}; after: "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")  # fmt: skip


if __name__ == "__main__":
    main()
