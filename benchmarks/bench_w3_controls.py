"""The added time of W3a's and W3b's controls on realistic sizes, one BLAS thread (the job's setting).

    PYTHONPATH=src python benchmarks/bench_w3_controls.py [--lemmas 800] [--d 576] [--layers 31]

Synthetic usages of the default run's size (800 lemmas, ~5,000 usages, ~20,000 same-form pairs, d = 576), a
design with 200 lemma resamples; then, each timed over a few repeats (median seconds):

* the shape-only regression with its held-out threshold (``heldout_threshold_predictions``, new) against the
  plain held-out decision values it replaces (``heldout_scores``); both run once per model (cached per pair set);
* ``heldout_measures`` per layer (the gain over shape adds a subtraction of resamples already computed);
* W3b's two-senses control per (layer, preprocessing): the 120 matched words' cluster indices at m = 6
  (``SplitControl.measure_reference``) and the 42 two-senses sets' cluster indices, contrast and power
  (``SplitControl.add_rows``).

Prints one JSON object: each part's seconds and the estimated added seconds for a model of ``--layers`` layers
(two preprocessings; ``heldout_measures`` on centred vectors only).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from contextuality.senses.rows import Rows
from contextuality.senses.separation.controls import _folds, heldout_measures
from contextuality.senses.separation.design import SeparationDesign
from contextuality.senses.separation.pair_scores import heldout_scores, heldout_threshold_predictions
from contextuality.senses.separation.split_control import SplitControl


def usages_of_size(lemmas: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(lemmas):
        senses = int(rng.integers(2, 5))
        for s in rng.integers(0, senses, int(rng.integers(3, 11))):
            rows.append(
                {"lemma": f"w{w}", "pos": "n", "synset": f"w{w}.{s}", "lexname": f"n.{s % 2}", "form_lower": f"w{w}"}
            )
    usages = pd.DataFrame(rows).reset_index(names="usage_id")
    lengths = rng.integers(3, 15, len(usages))
    usages["position"] = rng.integers(0, lengths)
    a, b = [], []
    for _, ids in usages.groupby("lemma")["usage_id"]:
        i, j = np.triu_indices(ids.size, 1)
        a.append(ids.to_numpy()[i]), b.append(ids.to_numpy()[j])
    a, b = np.concatenate(a), np.concatenate(b)
    syn, lex = usages["synset"].to_numpy(), usages["lexname"].to_numpy()
    pairs = pd.DataFrame({"usage_a": a, "usage_b": b, "same_sense": syn[a] == syn[b], "same_lexname": lex[a] == lex[b]})
    return usages, pairs, lengths


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lemmas", type=int, default=800)
    parser.add_argument("--d", type=int, default=576)
    parser.add_argument("--layers", type=int, default=31, help="layers of the model (SmolLM2-135M: 31 with layer 0)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    usages, pairs, lengths = usages_of_size(args.lemmas, 0)
    design = SeparationDesign(usages, pairs, permutations=1000, bootstrap=200, seed=0, lengths=lengths)
    sense = pd.factorize(usages["synset"])[0]
    x = rng.standard_normal((sense.max() + 1, args.d))[sense] + 3 * rng.standard_normal((len(usages), args.d))
    out = {"usages": len(usages), "pairs": len(pairs), "d": args.d}
    with threadpool_limits(1):
        cos = design.measure(x, controls=False)["cosines"]
        ok = np.isfinite(cos)
        idx = np.flatnonzero(ok)
        y, groups = design.same[idx], design.pair_lemma[idx]
        folds = _folds(design, groups)
        shape = design.shape[idx]
        out["shape_scores_before_s"] = timed(lambda: heldout_scores(shape, y, groups, folds), args.repeats)
        out["shape_scores_and_threshold_s"] = timed(
            lambda: heldout_threshold_predictions(shape, y, groups, folds), args.repeats
        )
        heldout_measures(design, cos, ok)  # the shape cache filled, as after a job's first layer
        out["heldout_measures_per_layer_s"] = timed(lambda: heldout_measures(design, cos, ok), args.repeats)
        split = _split_control(rng, args.d)
        out.update(_time_split(split, rng, args.d, args.repeats))
    added_once = out["shape_scores_and_threshold_s"] - out["shape_scores_before_s"]
    added_per_layer = 2 * (out["split_reference_s"] + out["split_rows_s"])
    out["added_per_model_s"] = added_once + args.layers * added_per_layer
    out["layers"] = args.layers
    print(json.dumps(out, indent=1))
    return out


def _split_control(rng, d: int) -> SplitControl:
    sets = [(f"s{i}", np.arange(8 * i, 8 * i + 4), np.arange(8 * i + 4, 8 * i + 8)) for i in range(42)]
    return SplitControl(sets, subsamples=5, components=5, seed=0)


def _time_split(split: SplitControl, rng, d: int, repeats: int) -> dict:
    words = {f"w{i}": rng.standard_normal((int(rng.integers(20, 200)), d)) for i in range(120)}
    group = pd.Series(["poly", "mono"] * 60, index=list(words))
    seeds = {w: i for i, w in enumerate(words)}
    usage_vectors = rng.standard_normal((8 * 42, d))
    reference = timed(lambda: split.measure_reference("centred", words, group, seeds), repeats)
    rows = timed(lambda: split.add_rows(Rows("m", 1), "centred", usage_vectors), repeats)
    return {"split_reference_s": reference, "split_rows_s": rows}


if __name__ == "__main__":
    main()
