"""Every word's self-similarity on every stored layer of a run, against a float64 brute force.

    python benchmarks/self_similarity_check.py --embeddings results/embeddings/sts/smollm2 --metrics results/metrics/sts/smollm2

For each layer file: the engine's self-similarity of every word (``word_stats``, as the measurement computes
it now, in ``--compute-dtype``, default float32) and a float64 brute force (every word's unit rows in float64;
the mean over every ordered pair i != j, all pairs formed explicitly for words of at most ``--pairs-limit``
occurrences, the identity sum_{i != j} cos = |sum u_i|^2 - n beyond); with ``--metrics``, also the run's own
``per_layer/layer_LL.words.parquet`` (what the workflow wrote, maybe by an older engine) against the same brute
force. Prints, per layer, the largest difference and how many words differ by more than ``--tolerance``
(1e-5), and the words mixing attention-sink rows (a row of norm above 100 x the layer's median norm) with
ordinary ones. Exit status 1 if the engine misses the tolerance anywhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from contextuality.measure.engine.transforms import Transform  # noqa: E402
from contextuality.measure.engine.word_stats import word_stats  # noqa: E402
from contextuality.measure.layer_job import OccurrenceIndex  # noqa: E402
from contextuality.measure.reference.measures import unit_rows  # noqa: E402
from contextuality.measure.reference.word_pcs import degenerate_tolerance  # noqa: E402
from contextuality.store.reader import LayerReader, read_manifest  # noqa: E402


def brute_force(X: np.ndarray, index: OccurrenceIndex, pairs_limit: int) -> np.ndarray:
    """Every word's mean cosine over ordered pairs of distinct non-zero rows, in float64."""
    ends = np.append(index.group_starts[1:], len(index.rows))
    values = np.full(len(index.words), np.nan)
    for w, (a, b) in enumerate(zip(index.group_starts, ends)):
        U = unit_rows(np.asarray(X[index.rows[a:b]], dtype=np.float64))
        U = U[(U != 0).any(axis=1)]
        n = len(U)
        if n < 2:
            continue
        if n <= pairs_limit:
            cosines = U @ U.T
            values[w] = (cosines.sum() - np.trace(cosines)) / (n * (n - 1))
        else:
            s = U.sum(axis=0)
            values[w] = (s @ s - n) / (n * (n - 1))
    return np.clip(values, -1.0, 1.0)


def print_summary(table: pd.DataFrame, tolerance: float) -> None:
    """Each layer's row, then the largest difference of the engine (and of the run's tables, where read) from the
    brute force over all layers, and how many word-layers lie above ``tolerance``."""
    print("\n" + table.to_string(index=False))
    print(f"\nengine: largest difference {table['engine_max_diff'].max():.3g} over {len(table)} layers; "
          f"{int(table['engine_over_tol'].sum())} word-layers above {tolerance:g}")  # fmt: skip
    if "run_max_diff" in table:
        print(
            f"the run's tables: largest difference {table['run_max_diff'].max():.3g}; "
            f"{int(table['run_over_tol'].sum())} word-layers above {tolerance:g}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embeddings", type=Path, required=True, help="results/embeddings/MODEL (manifest, layers/)")
    parser.add_argument("--metrics", type=Path, help="results/metrics/MODEL: also check the run's own words tables")
    parser.add_argument("--compute-dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--pairs-limit", type=int, default=2000, help="words up to this size get every pair formed")
    parser.add_argument("--layers", help="comma-separated layers (default: all)")
    args = parser.parse_args()
    manifest = read_manifest(args.embeddings / "manifest.json")
    index = OccurrenceIndex.from_parquet(args.embeddings / "occurrences.parquet")
    layers = range(manifest["n_layers"]) if not args.layers else [int(v) for v in args.layers.split(",")]
    rows, failed = [], False
    for layer in layers:
        with LayerReader(args.embeddings / manifest["layers"][layer], manifest) as reader:
            stored = reader.rows()
        X = stored.astype(args.compute_dtype)
        engine = word_stats(X, index.rows, index.group_starts, [Transform("none")], degenerate_tol=degenerate_tolerance(stored),
                            work_dtype=np.dtype(args.compute_dtype), first_vectors=False)["none"].self_similarity  # fmt: skip
        brute = brute_force(stored, index, args.pairs_limit)
        norms = np.linalg.norm(stored.astype(np.float32), axis=1)
        sink = norms > 100 * np.median(norms)
        word_of_row = np.repeat(np.arange(len(index.words)), np.diff(np.append(index.group_starts, len(index.rows))))
        mixed = np.zeros(len(index.words), dtype=bool)
        has_sink = np.bincount(word_of_row, weights=sink[index.rows], minlength=len(index.words))
        mixed[(has_sink > 0) & (has_sink < np.diff(np.append(index.group_starts, len(index.rows))))] = True
        diff = np.abs(engine - brute)
        row = {"layer": layer, "words": len(index.words), "sink_mixed_words": int(mixed.sum()),
               "engine_max_diff": float(np.nanmax(diff)), "engine_over_tol": int(np.nansum(diff > args.tolerance))}  # fmt: skip
        if args.metrics is not None:
            table = pd.read_parquet(args.metrics / "per_layer" / f"layer_{layer:02d}.words.parquet")
            written = table.set_index("word")["self_similarity"].reindex(index.words).to_numpy()
            run_diff = np.abs(written - brute)
            worst = int(np.nanargmax(run_diff))
            row.update({"run_max_diff": float(np.nanmax(run_diff)), "run_over_tol": int(np.nansum(run_diff > args.tolerance)),
                        "run_worst_word": str(index.words[worst])})  # fmt: skip
        failed |= row["engine_over_tol"] > 0
        rows.append(row)
        print(f"layer {layer}: engine {row['engine_max_diff']:.3g}" + (f", the run's table {row['run_max_diff']:.3g}"
              if "run_max_diff" in row else ""), flush=True)  # fmt: skip
    print_summary(pd.DataFrame(rows), args.tolerance)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
