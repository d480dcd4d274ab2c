"""``measure_layer`` on every layer of a model folder, one after the other, as the workflow's job runs it.

    PYTHONPATH=OTHER_CHECKOUT/src python benchmarks/measure_layers.py results/embeddings/MODEL --metrics '{"geometry": false}'

The child that ``bench_metrics.py --against-commit`` runs once with this checkout's package and once with
another commit's (``PYTHONPATH``), so both are timed by the same protocol: a fresh process, one BLAS and
OpenMP thread, the occurrence index and units read first (untimed), then each layer's ``measure_layer``
(its read included). It imports only what ``measure_layer``'s callers have long imported (the settings
schema and ``layer_job``), so it runs on older code too. Prints one JSON object: the package's folder,
and per layer its wall and CPU seconds and its self-similarity, intra-sentence similarity and MEV.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import pandas as pd
from threadpoolctl import threadpool_limits

import contextuality
from contextuality.measure.layer_job import OccurrenceIndex, measure_layer
from contextuality.workflow.schema import load_settings


def layer_files(folder: Path) -> dict[int, Path]:
    """The pipeline's layout (``{model}/layers/layer_NN.h5``), or a flat folder of layer files."""
    layers = folder / "layers" if (folder / "layers").is_dir() else folder
    return {int(re.fullmatch(r"layer_(\d+)\.h5", p.name).group(1)): p for p in layers.glob("layer_*.h5")}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a model folder: layers/ (or layer_NN.h5) and occurrences.parquet")
    parser.add_argument(
        "--metrics", default="{}", help="the config's metrics section (JSON); the schema's defaults else"
    )
    parser.add_argument("--layers", default=None, help="only these layers, comma-separated (default: every layer)")
    args = parser.parse_args(argv)
    settings = load_settings({"models": {}, "seed": 0, "metrics": json.loads(args.metrics)}).metrics.measure
    paths = layer_files(args.folder)
    chosen = sorted(paths) if args.layers is None else [int(v) for v in args.layers.split(",")]
    index = OccurrenceIndex(pd.read_parquet(args.folder / "occurrences.parquet"))
    units = None
    if settings.geometry and (args.folder / "units.parquet").exists():
        units = pd.read_parquet(args.folder / "units.parquet", columns=["row", "unit", "position"])
    layers = []
    with threadpool_limits(limits=1):
        for layer in chosen:
            wall, cpu = time.perf_counter(), time.process_time()
            result = measure_layer(paths[layer], layer, index, settings, model="bench", units=units, threads=1)
            layers.append({"layer": layer, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                           **{k: float(result.row[k]) for k in ("self_similarity", "intra_sentence", "mev")}})  # fmt: skip
    return {"package": str(Path(contextuality.__file__).resolve().parent), "layers": layers}


if __name__ == "__main__":
    print(json.dumps(main()))
