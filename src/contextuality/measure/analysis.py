"""The measurement step: one layer file in, that layer's measures out; then one model's tables.

``measure_layer`` reads one layer file once, whole, into memory (in its stored dtype), and takes every
measure of that layer from the in-memory array: the paper's measures, the exact baselines, the degenerate
words, the geometry beyond the paper (``rogue``, ``isotropy``, ``panel``) and the paper's measures of post-processed variants
of the vectors. The work is done by the engine (``layer_pass``, ``word_stats``) on one copy of the layer in the compute
dtype (float32 by default; sums over rows in float64): one pass over all rows, one over the indexed
occurrences. Peak memory is about the layer in its stored dtype plus that copy plus a few batches. It is
one workflow job per (model, layer), so layers are measured in parallel. ``combine_layers`` then joins the
per-layer results into the model's tables. Random draws come from streams derived from one seed, one per
purpose (and per layer where the paper redraws), never from the order the layers are measured in, so a
rerun with the same seed writes byte-identical files. Outputs follow docs/data-contract.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality.measure import reference
from contextuality.measure.isotropy import gaussian_null, isotropy_measures, permuted_null, sample_rows
from contextuality.measure.layer_pass import cosine_pass, exact_baseline_from_pass, layer_pass, make_transform, rogue_summary
from contextuality.measure.rogue import massive_activations, massive_carriers, rogue_dimensions
from contextuality.measure.transforms import VARIANTS, Transform
from contextuality.measure.word_pcs import DEGENERATE_FLOOR, STORAGE_EPSILON, degenerate_tolerance, group_sizes
from contextuality.measure.word_stats import word_stats
from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import collection_paused
from contextuality.static.embeddings import write_embedding_text
from contextuality.store.reader import LayerReader, check_layer, check_layer_set, read_layer
from contextuality.store.files import StoreError

__all__ = [
    "LayerResult", "combine_layers", "measure_layer", "measure_model", "read_layer", "rogue_table", "write_layer_results",
]  # fmt: skip

LOG = logging.getLogger(__name__)

SELF_SIMILARITY_MODES = ("exact", "sampled", "both")
COMPUTE_DTYPES = {"float32": np.float32, "float64": np.float64}
# Sub-seeds of the random streams; each purpose draws from its own stream.
_SENTENCE_SAMPLE, _BASELINE, _SAMPLED_PAIRS, _BOOTSTRAP, _GEOMETRY, _BOOTSTRAP_VARIANT = range(6)
WORD_COLUMNS = ["model", "word", "layer", "n", "self_similarity", "self_similarity_sampled", "mev", "mev_literal", "mev_centered"]
# The isotropy measures of isotropy_measures, and the columns of its null controls.
ISOTROPY_COLUMNS = ["pc1_ratio", "effective_rank", "isoscore", "isoscore_star", "twonn_dimension", "twonn_duplicate_fraction"]
NULL_COLUMNS = [f"null_{null}_{column}" for null in ("gaussian", "permuted") for column in ISOTROPY_COLUMNS + ["rogue_top1_share"]]
GEOMETRY_COLUMNS = [
    "rogue_anisotropy", "rogue_top1_share", "rogue_top3_share", "rogue_top10_share", "rogue_dims",
    "massive_dims", "massive_occurrences", "massive_top_units", "massive_first_position_share",
    "massive_first_position_rate", *ISOTROPY_COLUMNS, *NULL_COLUMNS, "geometry_sample",
]  # fmt: skip
GEOMETRY_TEXT_COLUMNS = ("rogue_dims", "massive_dims", "massive_top_units")
LAYER_COLUMNS = [
    "model", "layer", "n_words", "n_sentences_sampled",
    "self_similarity", "self_similarity_ci_low", "self_similarity_ci_high",
    "intra_sentence", "intra_sentence_ci_low", "intra_sentence_ci_high",
    "mev", "mev_ci_low", "mev_ci_high", "mev_literal", "mev_centered",
    "baseline_cosine", "baseline_mev",
    "adjusted_self_similarity", "adjusted_intra_sentence", "adjusted_mev",
    "norm_mean", "norm_std",
    "self_similarity_sampled", "n_baseline_vectors",
    "baseline_cosine_exact", "baseline_cosine_exact_between", "baseline_cosine_uniform", "baseline_mev_exact",
    "adjusted_self_similarity_exact", "adjusted_intra_sentence_exact", "adjusted_mev_exact",
    "n_degenerate_words", "after_final_norm",
    *GEOMETRY_COLUMNS,
]  # fmt: skip
# The paper's measures per post-processing variant (results/metrics/{model}/postprocess.csv).
POSTPROCESS_COLUMNS = [
    "model", "layer", "postprocess", "self_similarity", "self_similarity_ci_low", "self_similarity_ci_high",
    "intra_sentence", "intra_sentence_ci_low", "intra_sentence_ci_high", "mev", "mev_ci_low", "mev_ci_high",
    "mev_literal", "mev_centered", "baseline_cosine", "baseline_mev", "baseline_cosine_exact", "baseline_mev_exact",
    "adjusted_self_similarity", "adjusted_intra_sentence", "adjusted_mev",
    "adjusted_self_similarity_exact", "adjusted_intra_sentence_exact", "adjusted_mev_exact", "n_degenerate_words",
]  # fmt: skip
ROGUE_COLUMNS = ["model", "layer", "dimension", "rank", "contribution", "share"]
CONTEXT_WORD_COLUMNS = ["rank", "kind", "word", "mean_self_similarity", "n"]


def _rng(seed: int, purpose: int, layer: int = 0, *more: int) -> np.random.Generator:
    """The random stream for one purpose (and layer, ...), independent of the order work is done in."""
    return np.random.default_rng([seed, purpose, layer, *more])


def _bootstrap_mean_ci(values: np.ndarray, rng: np.random.Generator, n_resamples: int) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean (NaNs dropped), as ``reference.bootstrap_ci`` defines it,
    drawn directly with numpy (for the post-processed variants: the same method at a fraction of the cost)."""
    values, trivial = reference.bootstrap_input(values, n_resamples)
    if trivial is not None:
        return trivial
    means = np.empty(n_resamples)
    step = max(1, (1 << 22) // len(values))
    for start in range(0, n_resamples, step):
        count = min(step, n_resamples - start)
        means[start : start + count] = values[rng.integers(0, len(values), size=(count, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _mean_or_nan(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else float("nan")


def _sampled_self_similarity(vectors, rows, group_starts, *, seed, sampled_pairs) -> np.ndarray:
    """The paper's sampled self-similarity of every word (at most ``sampled_pairs`` ordered pairs each)."""
    # Same stream at every layer: a word gets the same sampled pairs in each layer, as in the paper's code.
    pair_rng = _rng(seed, _SAMPLED_PAIRS)
    ends = np.append(group_starts[1:], len(rows))
    return np.array([
        reference.self_similarity_sampled(np.asarray(vectors[rows[a:b]], dtype=np.float64), pair_rng, sampled_pairs)
        for a, b in zip(group_starts, ends)
    ])  # fmt: skip


def _context_specific_words(words: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The ``top_k`` words with the lowest and highest mean self-similarity over layers >= 1."""
    upper = words[words["layer"] >= 1].dropna(subset=["primary"])
    means = upper.groupby("word", sort=True).agg(mean_self_similarity=("primary", "mean"), n=("n", "first")).reset_index()
    ordered = means.sort_values(["mean_self_similarity", "word"], kind="stable")
    most = ordered.head(top_k).assign(kind="most_context_specific")
    least = ordered.iloc[::-1].head(top_k).assign(kind="least_context_specific")
    table = pd.concat([most.assign(rank=np.arange(1, len(most) + 1)), least.assign(rank=np.arange(1, len(least) + 1))])
    return table[CONTEXT_WORD_COLUMNS].reset_index(drop=True)


class OccurrenceIndex:
    """The occurrences of one model as the measures need them: rows grouped by word (sorted by word, row)."""

    def __init__(self, occurrences: pd.DataFrame):
        occurrences = occurrences.sort_values(["word", "row"], kind="stable")
        word_of_row = occurrences["word"].to_numpy()
        self.rows = occurrences["row"].to_numpy(dtype=np.int64)
        self.group_starts = np.flatnonzero(np.concatenate([[len(self.rows) > 0], word_of_row[1:] != word_of_row[:-1]]))
        self.words = word_of_row[self.group_starts]
        self.counts = group_sizes(self.group_starts, len(self.rows))


class LayerResult(NamedTuple):
    """Everything one layer's measurement gives (``measure_layer``)."""

    record: dict  # one row of layers.parquet, plus "_shape"
    words: pd.DataFrame  # the layer's rows of words.parquet, plus "primary"
    first_vectors: np.ndarray  # (words, d): the PC static embeddings (pcs/layer_LL.txt)
    postprocess: list  # one row of postprocess.csv per post-processing variant
    rogue: np.ndarray  # (d,) each dimension's contribution to the exact anisotropy A_p (NaN without geometry)


def _layer_read(path: Path, dtype=None) -> tuple[np.ndarray, np.ndarray, dict, np.dtype]:
    """The one read of a layer: its vectors (in ``dtype``, converted slice by slice as they are read; the
    stored dtype if None), sentence offsets, file attributes and stored dtype."""
    with LayerReader(path) as reader:
        stored = reader.dtype
        wanted = None if dtype is None or np.dtype(dtype).itemsize < stored.itemsize else dtype
        return reader.rows(dtype=wanted), reader.offsets, dict(reader.handle.attrs), stored


def _paper_weights(offsets: np.ndarray) -> np.ndarray:
    """p_i = 1 / (S len(s_i)): the paper's chance of drawing row i (a sentence, then a row in it)."""
    lengths = np.diff(offsets)
    n_sentences = max(int(np.count_nonzero(lengths)), 1)
    return np.repeat(1.0 / (n_sentences * np.maximum(lengths, 1)), lengths)


def _geometry_columns(stored, passed, rng, *, sample_size, twonn_sample, units, positions) -> tuple[dict, np.ndarray]:
    """``panel.geometry_panel``'s row of one layer, the rogue contributions taken from the layer pass.

    Same numbers as ``geometry_panel(stored, rng, sample_size, weights=p_i, units=..., positions=...,
    twonn_sample_size=twonn_sample)`` (the rogue dimensions weighted by the paper's sampling, so that
    their contributions add up to the exact baseline A_p), with rng used in the same order.
    """
    d = stored.shape[1]
    rogue = rogue_summary(passed, d)
    massive = massive_activations(stored)
    row = {
        "rogue_anisotropy": rogue.total,
        "rogue_top1_share": rogue.shares[1], "rogue_top3_share": rogue.shares[3], "rogue_top10_share": rogue.shares[10],
        "rogue_dims": ",".join(str(int(v)) for v in rogue.top_dims),
        "massive_dims": ",".join(str(int(v)) for v in massive.dims),
        "massive_occurrences": massive.n_occurrences,
        "massive_top_units": "", "massive_first_position_share": float("nan"), "massive_first_position_rate": float("nan"),
    }  # fmt: skip
    if units is not None and positions is not None:
        carriers = massive_carriers(massive.rows, units, positions)
        row["massive_top_units"] = json.dumps(carriers.top_units, ensure_ascii=False) if carriers.top_units else ""
        row["massive_first_position_share"] = carriers.first_position_share
        row["massive_first_position_rate"] = carriers.first_position_rate
    sample = np.asarray(sample_rows(stored, rng, sample_size), dtype=np.float64)
    gaussian = gaussian_null(len(sample), d, rng)
    permuted = permuted_null(sample, rng)
    row.update(isotropy_measures(sample, twonn_sample_size=twonn_sample))
    for prefix, null in (("null_gaussian_", gaussian), ("null_permuted_", permuted)):
        row.update({prefix + key: value for key, value in isotropy_measures(null, twonn_sample_size=twonn_sample).items()})
        row[prefix + "rogue_top1_share"] = rogue_dimensions(null).shares[1]
    row["geometry_sample"] = len(sample)
    return row, rogue.contributions


def _no_geometry(d: int) -> tuple[dict, np.ndarray]:
    row = {column: ("" if column in GEOMETRY_TEXT_COLUMNS else float("nan")) for column in GEOMETRY_COLUMNS}
    row["massive_occurrences"] = row["geometry_sample"] = 0
    return row, np.full(d, np.nan)


def _sentence_block(X, transform: Transform, offsets, sentence_ids):
    """The rows of the given sentences, transformed (float64), with offsets of their own (sentence k = k)."""
    rows, counts = reference.sentence_rows(offsets, sentence_ids)
    return transform.rows(X[rows], np.float64), np.concatenate([[0], np.cumsum(counts)]), np.arange(len(counts))


def _variant_measures(X, offsets, transform, word, sums, passed, *, intra_ids, baseline_ids, layer, seed,
                      baseline_samples, tol, mev_layer0) -> tuple[dict, dict]:
    """The paper's layer-level measures of one variant: its postprocess.csv row and the per-item arrays."""
    if transform.identity:
        intra = reference.intra_sentence_similarity(X, offsets, intra_ids)
        baseline = reference.anisotropy_baseline(X, offsets, baseline_ids, _rng(seed, _BASELINE, layer), baseline_samples)
    else:
        block, local, ids = _sentence_block(X, transform, offsets, intra_ids)
        intra = reference.intra_sentence_similarity(block, local, ids)
        block, local, ids = _sentence_block(X, transform, offsets, baseline_ids)
        # the same stream as the stored vectors' baseline: the same sentences, rows and pairs are drawn
        baseline = reference.anisotropy_baseline(block, local, ids, _rng(seed, _BASELINE, layer), baseline_samples)
    exact = exact_baseline_from_pass(passed, sums, transform, tol)
    mev = word.mev
    if layer == 0 and not mev_layer0:
        # the paper reports no MEV at the input layer
        mev = np.full_like(mev, np.nan)
    self_mean, intra_mean, mev_mean = _mean_or_nan(word.self_similarity), _mean_or_nan(intra), _mean_or_nan(mev)
    masked = layer == 0 and not mev_layer0
    row = {
        "self_similarity": self_mean, "intra_sentence": intra_mean, "mev": mev_mean,
        "mev_literal": float("nan") if masked else _mean_or_nan(word.mev_literal),
        "mev_centered": float("nan") if masked else _mean_or_nan(word.mev_centered),
        "baseline_cosine": baseline.cosine, "baseline_mev": baseline.mev,
        "baseline_cosine_exact": exact.cosine, "baseline_mev_exact": exact.mev,
        "adjusted_self_similarity": self_mean - baseline.cosine, "adjusted_intra_sentence": intra_mean - baseline.cosine,
        "adjusted_mev": mev_mean - baseline.mev,
        "adjusted_self_similarity_exact": self_mean - exact.cosine,
        "adjusted_intra_sentence_exact": intra_mean - exact.cosine, "adjusted_mev_exact": mev_mean - exact.mev,
        "n_degenerate_words": int(np.count_nonzero(word.degenerate)),
    }  # fmt: skip
    return row, {"intra": intra, "mev": mev, "baseline": baseline, "exact": exact}


@collection_paused()  # the layer's work allocates no cycles; a full collection would walk the units table
def measure_layer(
    layer_path: Path,
    layer: int,
    occurrences: pd.DataFrame | OccurrenceIndex,
    *,
    model: str,
    seed: int,
    intra_sentences: int | str = 500,
    baseline_samples: int = 1000,
    self_similarity: str = "exact",
    sampled_pairs: int = 1000,
    mev_layer0: bool = False,
    bootstrap_resamples: int = 1000,
    manifest: dict | None = None,
    units: pd.DataFrame | None = None,
    geometry_panel: bool = True,
    geometry_sample: int = 5000,
    twonn_sample: int | None = 1000,
    postprocess: tuple[str, ...] | list[str] = ("none",),
    compute_dtype: str = "float32",
    threads: int = 1,
    log: logging.Logger = LOG,
) -> LayerResult:
    """Every measure of one layer, from one read of its file (see ``LayerResult``).

    The paper's measures: ``intra_sentences`` sentences (or ``"all"``) are averaged for intra-sentence
    similarity and ``baseline_samples`` sentences feed the sampled baselines (and ``baseline_samples``
    pairs the cosine baseline); both sets are prefixes of one seeded permutation of the sentences, the
    same for every layer (spec 4.4). ``self_similarity`` chooses the exact all-pairs mean, the paper's
    sampled estimate (at most ``sampled_pairs`` ordered pairs), or both; the per-layer mean uses the
    exact values whenever they are computed. MEV is computed for layers >= 1 (and layer 0 too if
    ``mev_layer0``); the PC vectors for every layer (layer 0: Table 1's static baseline).

    Beside them: the exact baselines (``exact_baseline.exact_baseline``: no sampling) and the adjusted values
    against them; the number of degenerate words (``word_pcs.degenerate_words``: their MEV is NaN);
    ``after_final_norm`` (the file's attribute); with ``geometry_panel`` the columns of
    ``panel.geometry_panel`` (isotropy on ``geometry_sample`` rows, TwoNN on ``twonn_sample`` of
    them); for each variant in ``postprocess`` (``none``, ``standardize``, ``abtt``) the paper's measures
    of the transformed vectors. All of it is computed from one read of the layer, in
    ``compute_dtype`` (the engine (``layer_pass``, ``word_stats``)). With a ``manifest`` (the model's
    ``manifest.json``), the layer file is first checked against it (index, rows, dims); ``units`` (the
    model's units.parquet) names the units carrying massive activations.
    """
    if self_similarity not in SELF_SIMILARITY_MODES:
        raise ValueError(f"self_similarity must be one of {SELF_SIMILARITY_MODES}, got {self_similarity!r}")
    if not (intra_sentences == "all" or (isinstance(intra_sentences, int) and intra_sentences > 0)):
        raise ValueError(f"intra_sentences must be a positive integer or 'all', got {intra_sentences!r}")
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got {compute_dtype!r}")
    unknown = sorted(set(postprocess) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown post-processing {unknown}; expected some of {list(VARIANTS)}")
    variants = ["none"] + [name for name in VARIANTS if name in postprocess and name != "none"]
    work = COMPUTE_DTYPES[compute_dtype]
    index = occurrences if isinstance(occurrences, OccurrenceIndex) else OccurrenceIndex(occurrences)
    if manifest is not None:
        check_layer(layer_path, manifest, layer)
    started = time.perf_counter()
    # read in the compute dtype: every stored value is exact in it (float16 and float32 in float32)
    stored, offsets, attrs, stored_dtype = _layer_read(Path(layer_path), work)
    if len(index.rows) and index.rows.max() >= len(stored):
        raise StoreError(f"{layer_path}: occurrences refer to row {index.rows.max()} but the file has {len(stored)} rows")
    n_sentences = len(offsets) - 1
    if manifest is not None and n_sentences != manifest["n_sentences"]:
        raise StoreError(f"{layer_path}: {n_sentences} sentences, but the manifest lists {manifest['n_sentences']}")
    if units is not None and len(units) != len(stored):
        raise StoreError(f"{layer_path}: {len(stored)} rows, but units.parquet lists {len(units)}")
    sentence_sample = _rng(seed, _SENTENCE_SAMPLE).permutation(n_sentences)
    intra_ids = sentence_sample if intra_sentences == "all" else sentence_sample[:intra_sentences]
    baseline_ids = sentence_sample[:baseline_samples]
    # the storage format's rounding, once per layer (stored values carry its eps whatever they were read as)
    if stored.dtype == stored_dtype or stored_dtype.name not in STORAGE_EPSILON:
        tol = degenerate_tolerance(stored)
    else:
        tol = max(STORAGE_EPSILON[stored_dtype.name] ** 2, DEGENERATE_FLOOR)
    d = stored.shape[1]

    # The linear algebra is many small problems plus a few rank-k updates; the workflow measures one
    # layer per core (one job each), where one thread per job (BLAS, and OpenMP in scikit-learn's
    # neighbour search) is fastest (``threads``).
    with threadpool_limits(limits=threads):
        if geometry_panel:
            unit_labels = positions = None
            if units is not None:
                ordered = units if units["row"].is_monotonic_increasing else units.sort_values("row", kind="stable")
                unit_labels, positions = ordered["unit"].to_numpy(dtype=object), ordered["position"].to_numpy()
        X = stored if stored.dtype == work else stored.astype(work)  # a float32 layer in float64 work
        passed = layer_pass(X, offsets, work, rogue=geometry_panel)
        transforms = [make_transform(name, passed) for name in variants]
        sums = {"none": passed.cosines, **cosine_pass(X, offsets, transforms[1:], work)}
        words_by_variant = word_stats(X, index.rows, index.group_starts, transforms, degenerate_tol=tol,
                                                 work_dtype=work)  # fmt: skip
        rows_by_variant, arrays = {}, {}
        for transform in transforms:
            rows_by_variant[transform.name], arrays[transform.name] = _variant_measures(
                X, offsets, transform, words_by_variant[transform.name], sums[transform.name], passed,
                intra_ids=intra_ids, baseline_ids=baseline_ids, layer=layer, seed=seed,
                baseline_samples=baseline_samples, tol=tol, mev_layer0=mev_layer0,
            )  # fmt: skip
        none_words = words_by_variant["none"]
        exact_self = none_words.self_similarity if self_similarity in ("exact", "both") else np.full(len(index.words), np.nan)
        sampled = (
            _sampled_self_similarity(stored, index.rows, index.group_starts, seed=seed, sampled_pairs=sampled_pairs)
            if self_similarity in ("sampled", "both") else np.full(len(index.words), np.nan)
        )  # fmt: skip
        primary = sampled if self_similarity == "sampled" else exact_self
        intra, mev = arrays["none"]["intra"], arrays["none"]["mev"]
        baseline, exact = arrays["none"]["baseline"], arrays["none"]["exact"]
        norms = reference.row_norms(stored[reference.sentence_rows(offsets, baseline_ids)[0]])

        bootstrap_rng = _rng(seed, _BOOTSTRAP, layer)
        self_ci, intra_ci, mev_ci = (
            reference.bootstrap_ci(values, bootstrap_rng, bootstrap_resamples) for values in (primary, intra, mev)
        )
        postprocess_rows = []
        for number, transform in enumerate(transforms):
            if transform.name not in postprocess:
                continue
            row = {"model": model, "layer": layer, "postprocess": transform.name, **rows_by_variant[transform.name]}
            if transform.identity:
                cis = (self_ci, intra_ci, mev_ci)
            else:
                rng = _rng(seed, _BOOTSTRAP_VARIANT, layer, number)
                values = (words_by_variant[transform.name].self_similarity, arrays[transform.name]["intra"],
                          arrays[transform.name]["mev"])  # fmt: skip
                cis = [_bootstrap_mean_ci(v, rng, bootstrap_resamples) for v in values]
            for name, ci in zip(("self_similarity", "intra_sentence", "mev"), cis):
                row[f"{name}_ci_low"], row[f"{name}_ci_high"] = ci
            postprocess_rows.append({column: row[column] for column in POSTPROCESS_COLUMNS})

        if geometry_panel:
            panel, rogue = _geometry_columns(
                stored, passed, _rng(seed, _GEOMETRY, layer), sample_size=geometry_sample, twonn_sample=twonn_sample,
                units=unit_labels, positions=positions,
            )  # fmt: skip
        else:
            panel, rogue = _no_geometry(d)
    self_mean, intra_mean, mev_mean = _mean_or_nan(primary), _mean_or_nan(intra), _mean_or_nan(mev)
    masked = layer == 0 and not mev_layer0
    record = {
        "model": model, "layer": layer, "n_words": len(index.group_starts), "n_sentences_sampled": int((~np.isnan(intra)).sum()),
        "self_similarity": self_mean, "self_similarity_ci_low": self_ci[0], "self_similarity_ci_high": self_ci[1],
        "intra_sentence": intra_mean, "intra_sentence_ci_low": intra_ci[0], "intra_sentence_ci_high": intra_ci[1],
        "mev": mev_mean, "mev_ci_low": mev_ci[0], "mev_ci_high": mev_ci[1],
        "mev_literal": float("nan") if masked else _mean_or_nan(none_words.mev_literal),
        "mev_centered": float("nan") if masked else _mean_or_nan(none_words.mev_centered),
        "baseline_cosine": baseline.cosine, "baseline_mev": baseline.mev,
        "adjusted_self_similarity": self_mean - baseline.cosine,
        "adjusted_intra_sentence": intra_mean - baseline.cosine,
        "adjusted_mev": mev_mean - baseline.mev,
        "norm_mean": _mean_or_nan(norms), "norm_std": float(norms.std()) if len(norms) else float("nan"),
        "self_similarity_sampled": _mean_or_nan(sampled), "n_baseline_vectors": baseline.n_vectors,
        "baseline_cosine_exact": exact.cosine, "baseline_cosine_exact_between": exact.cosine_between,
        "baseline_cosine_uniform": exact.cosine_uniform, "baseline_mev_exact": exact.mev,
        "adjusted_self_similarity_exact": self_mean - exact.cosine,
        "adjusted_intra_sentence_exact": intra_mean - exact.cosine,
        "adjusted_mev_exact": mev_mean - exact.mev,
        "n_degenerate_words": int(np.count_nonzero(none_words.degenerate)),
        "after_final_norm": int(attrs.get("after_final_norm", 0)),
        **panel,
    }  # fmt: skip
    words = pd.DataFrame({
        "model": model, "word": index.words, "layer": layer, "n": index.counts,
        "self_similarity": exact_self, "self_similarity_sampled": sampled,
        "mev": mev, "mev_literal": np.full_like(mev, np.nan) if masked else none_words.mev_literal,
        "mev_centered": np.full_like(mev, np.nan) if masked else none_words.mev_centered, "primary": primary,
    })  # fmt: skip
    log.info(
        "%s layer %d: self-sim %.3f, intra %.3f, MEV %.3f, baseline cos %.3f (exact %.3f) MEV %.3f (exact %.3f), "
        "%d degenerate words, variants %s (%.1f s)",
        model, layer, record["self_similarity"], record["intra_sentence"], record["mev"], record["baseline_cosine"],
        record["baseline_cosine_exact"], record["baseline_mev"], record["baseline_mev_exact"],
        record["n_degenerate_words"], ",".join(variants), time.perf_counter() - started,
    )  # fmt: skip
    # what the layer was measured on, for the combining step's check against the manifest
    record["_shape"] = {"rows": int(stored.shape[0]), "dim": int(d)}
    return LayerResult(record, words, none_words.first_vector, postprocess_rows, rogue)


def write_layer_results(result: LayerResult, out_record: Path, out_words: Path, out_pcs: Path) -> None:
    """One layer's results: its record (JSON, floats exact, with its post-processing rows under
    ``_postprocess`` and its rogue contributions under ``_rogue``), its words table (parquet), its PC
    vectors (text)."""
    record = {**result.record, "_postprocess": result.postprocess, "_rogue": [float(v) for v in result.rogue]}
    with atomic_path(out_record) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n")
    with atomic_path(out_words) as tmp:
        result.words.to_parquet(tmp, index=False)
    write_embedding_text(Path(out_pcs), result.words["word"].to_numpy(), result.first_vectors)


def rogue_table(records: list[dict]) -> pd.DataFrame:
    """Each layer's per-dimension contributions to its exact anisotropy A_p, largest first (rank 1).

    ``share`` is the contribution over the layer's A_p (NaN when A_p is not above its isotropic noise,
    as the rogue shares are). Layers measured without the geometry panel have no rows.
    """
    frames = []
    for record in records:
        contributions = np.asarray(record.get("_rogue", []), dtype=np.float64)
        if not len(contributions) or not np.isfinite(contributions).any():
            continue
        order = np.argsort(-contributions, kind="stable")
        total = float(np.sum(contributions))
        usable = np.isfinite(record.get("rogue_top1_share", np.nan))
        frames.append(pd.DataFrame({
            "model": record["model"], "layer": record["layer"], "dimension": order, "rank": np.arange(1, len(order) + 1),
            "contribution": contributions[order], "share": contributions[order] / total if usable else np.nan,
        }))  # fmt: skip
    if not frames:
        return pd.DataFrame(columns=ROGUE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[ROGUE_COLUMNS]


def combine_layers(
    records: list[dict],
    word_tables: list[pd.DataFrame],
    out_words: Path,
    out_layers: Path,
    out_context_words: Path,
    *,
    top_k: int = 20,
    manifest: dict | None = None,
    manifest_path: Path | str = "manifest.json",
    out_postprocess: Path | None = None,
    out_rogue: Path | None = None,
) -> None:
    """A model's tables from its per-layer results, after checking they cover exactly the manifest's layers.

    Also, when asked: ``out_postprocess`` (CSV, one row per layer and post-processing variant) and
    ``out_rogue`` (CSV, ``rogue_table``).
    """
    if manifest is not None:
        check_layer_set(manifest, {record["layer"]: record["_shape"] for record in records}, manifest_path)
    order = np.argsort([record["layer"] for record in records], kind="stable")
    ordered = [records[i] for i in order]
    layer_records = [{k: v for k, v in record.items() if not k.startswith("_")} for record in ordered]
    word_table = pd.concat([word_tables[i] for i in order], ignore_index=True).astype({"layer": "int64", "n": "int64"})
    layer_table = pd.DataFrame(layer_records, columns=LAYER_COLUMNS).astype(
        {"layer": "int64", "n_words": "int64", "n_degenerate_words": "int64", "after_final_norm": "int64",
         "massive_occurrences": "int64", "geometry_sample": "int64", **{c: "str" for c in GEOMETRY_TEXT_COLUMNS}}
    )  # fmt: skip
    with atomic_path(out_words) as tmp:
        word_table[WORD_COLUMNS].to_parquet(tmp, index=False)
    with atomic_path(out_layers) as tmp:
        layer_table.to_parquet(tmp, index=False)
    with atomic_path(out_context_words) as tmp:
        _context_specific_words(word_table, top_k).to_csv(tmp, index=False)
    if out_postprocess is not None:
        rows = [row for record in ordered for row in record.get("_postprocess", [])]
        table = pd.DataFrame(rows, columns=POSTPROCESS_COLUMNS).astype({"layer": "int64", "n_degenerate_words": "int64"})
        with atomic_path(out_postprocess) as tmp:
            table.to_csv(tmp, index=False, float_format="%.6g")
    if out_rogue is not None:
        with atomic_path(out_rogue) as tmp:
            rogue_table(ordered).to_csv(tmp, index=False, float_format="%.6g")


def measure_model(
    layer_paths: Mapping[int, Path],
    occurrences: pd.DataFrame,
    out_words: Path,
    out_layers: Path,
    out_pcs_dir: Path,
    out_context_words: Path,
    *,
    model: str,
    seed: int,
    top_k: int = 20,
    out_postprocess: Path | None = None,
    out_rogue: Path | None = None,
    log: logging.Logger = LOG,
    **options,
) -> None:
    """Every layer of one model in one process, with the same outputs as the workflow's per-layer jobs.

    For tests and benchmarks; ``options`` are those of ``measure_layer``. PC vectors go to
    ``out_pcs_dir/layer_{LL}.txt``.
    """
    if not layer_paths:
        raise ValueError(f"{model}: no layer files to measure")
    index = OccurrenceIndex(occurrences)
    log.info("%s: %d words, %d occurrences, layers %s", model, len(index.words), len(index.rows), sorted(layer_paths))
    records, tables = [], []
    out_pcs_dir = Path(out_pcs_dir)
    out_pcs_dir.mkdir(parents=True, exist_ok=True)
    for layer in tqdm(sorted(layer_paths), desc=f"measure {model}", unit="layer", mininterval=5):
        result = measure_layer(Path(layer_paths[layer]), layer, index, model=model, seed=seed, log=log, **options)
        records.append({**result.record, "_postprocess": result.postprocess, "_rogue": list(result.rogue)})
        tables.append(result.words)
        write_embedding_text(out_pcs_dir / f"layer_{layer:02d}.txt", index.words, result.first_vectors)
    combine_layers(records, tables, out_words, out_layers, out_context_words, top_k=top_k,
                   out_postprocess=out_postprocess, out_rogue=out_rogue)  # fmt: skip
