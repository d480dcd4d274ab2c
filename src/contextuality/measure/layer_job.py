"""The measurement job: one layer file in, every measure of that layer out (a ``LayerResult``).

``measure_layer`` reads one layer file once, whole, into memory (in the compute dtype), and takes every
measure of that layer from the in-memory array: the paper's measures, the exact baselines, the degenerate
words, the paper's measures of post-processed variants of the vectors, the geometry beyond the paper
(``panel``) and the bootstrap intervals. The work is done by the engine (``layer_pass``, ``word_stats``)
on one copy of the layer in the compute dtype (float32 by default; sums over rows in float64): one pass
over all rows, one over the indexed occurrences. Peak memory is about the layer in its stored dtype plus
that copy plus a few batches. It is one workflow job per (model, layer), so layers are measured in
parallel; ``combine.combine_layers`` then joins the per-layer results into the model's tables. Random
draws come from streams derived from one seed, one per purpose (and per layer where the paper redraws),
never from the order the layers are measured in, so a rerun with the same seed writes byte-identical
files. Outputs follow docs/data-contract.md.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from contextuality.core.runtime import collection_paused
from contextuality.core.settings import MeasureSettings
from contextuality.measure.exact_baseline import ExactBaseline
from contextuality.measure.finite import non_finite_error
from contextuality.measure.layer_pass import (
    LayerPass, NonFiniteRows, cosine_pass, exact_baseline_from_pass, layer_pass, make_transform, rogue_summary,
)  # fmt: skip
from contextuality.measure.layer_result import LAYER_COLUMNS, POSTPROCESS_COLUMNS, LayerResult, LayerShape
from contextuality.measure.panel import empty_panel, panel_row
from contextuality.measure.reference import (
    Baseline, anisotropy_baseline, bootstrap_ci, bootstrap_input, intra_sentence_similarity, row_norms,
    self_similarity_sampled, sentence_rows,
)  # fmt: skip
from contextuality.measure.transforms import VARIANTS, Transform
from contextuality.measure.word_pcs import DEGENERATE_FLOOR, STORAGE_EPSILON, degenerate_tolerance, group_sizes
from contextuality.measure.word_stats import WordStats, word_stats
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader, check_layer

LOG = logging.getLogger(__name__)

SELF_SIMILARITY_MODES = ("exact", "sampled", "both")
COMPUTE_DTYPES = {"float32": np.float32, "float64": np.float64}
# Sub-seeds of the random streams; each purpose draws from its own stream.
_SENTENCE_SAMPLE, _BASELINE, _SAMPLED_PAIRS, _BOOTSTRAP, _GEOMETRY, _BOOTSTRAP_VARIANT = range(6)


def _rng(seed: int, purpose: int, layer: int = 0, *more: int) -> np.random.Generator:
    """The random stream for one purpose (and layer, ...), independent of the order work is done in."""
    return np.random.default_rng([seed, purpose, layer, *more])


class OccurrenceIndex:
    """The occurrences of one model as the measures need them: rows grouped by word (sorted by word, row)."""

    def __init__(self, occurrences: pd.DataFrame):
        occurrences = occurrences.sort_values(["word", "row"], kind="stable")
        word_of_row = occurrences["word"].to_numpy()
        self.rows = occurrences["row"].to_numpy(dtype=np.int64)
        self.group_starts = np.flatnonzero(np.concatenate([[len(self.rows) > 0], word_of_row[1:] != word_of_row[:-1]]))
        self.words = word_of_row[self.group_starts]
        self.counts = group_sizes(self.group_starts, len(self.rows))


class _Layer(NamedTuple):
    """A layer as read and checked (``_read_checked``), and the sentences its sampled measures use."""

    stored: np.ndarray  # the vectors in the compute dtype (in their stored dtype when that is wider)
    offsets: np.ndarray  # sentence offsets
    after_final_norm: int  # the file's attribute
    tol: float  # the degenerate-word tolerance of the storage format
    intra_ids: np.ndarray  # the sentences of the intra-sentence similarity
    baseline_ids: np.ndarray  # the sentences of the sampled baselines (a prefix of the same permutation)


class _Variant(NamedTuple):
    """The paper's measures of one variant of the vectors (``none``: the stored ones)."""

    transform: Transform
    words: WordStats  # per word: self-similarity, MEV variants, degenerate words
    intra: np.ndarray  # intra-sentence similarity of each sampled sentence
    mev: np.ndarray  # the paper's MEV per word; NaN at layer 0 unless ``mev_layer0``
    baseline: Baseline  # the sampled anisotropy baselines
    exact: ExactBaseline  # the exact ones


@collection_paused()  # the layer's work allocates no cycles; a full collection would walk the units table
def measure_layer(
    layer_path: Path,
    layer: int,
    occurrences: pd.DataFrame | OccurrenceIndex,
    settings: MeasureSettings,
    *,
    model: str,
    manifest: dict | None = None,
    units: pd.DataFrame | None = None,
    threads: int = 1,
    log: logging.Logger = LOG,
) -> LayerResult:
    """Every measure of one layer, from one read of its file (see ``LayerResult``).

    The paper's measures: ``settings.intra_sentences`` sentences (or ``"all"``) are averaged for
    intra-sentence similarity and ``baseline_samples`` sentences feed the sampled baselines (and
    ``baseline_samples`` pairs the cosine baseline); both sets are prefixes of one seeded permutation of
    the sentences, the same for every layer (spec 4.4). ``self_similarity`` chooses the exact all-pairs
    mean, the paper's sampled estimate (at most ``sampled_pairs`` ordered pairs), or both; the per-layer
    mean uses the exact values whenever they are computed. MEV is computed for layers >= 1 (and layer 0
    too if ``mev_layer0``); the PC vectors for every layer (layer 0: Table 1's static baseline).

    Beside them: the exact baselines (``exact_baseline``: no sampling) and the adjusted values against
    them; the number of degenerate words (``word_pcs.degenerate_words``: their MEV is NaN);
    ``after_final_norm`` (the file's attribute); with ``geometry`` the columns of ``panel.geometry_panel``
    (isotropy on ``geometry_sample`` rows, TwoNN on ``twonn_sample`` of them); for each variant in
    ``postprocess`` (``none``, ``standardize``, ``abtt``) the paper's measures of the transformed
    vectors. All of it is computed from one read of the layer, in ``compute_dtype``. With a
    ``manifest`` (the model's ``manifest.json``, ``read_manifest``), the layer file is first checked against
    it (index, rows, dims, provenance; it may map only the manifest's shards); ``units`` (the model's units.parquet) names the units carrying massive activations.
    ``threads``: BLAS and OpenMP threads (the workflow measures one layer per core, one thread each).
    """
    _check_settings(settings)
    work = COMPUTE_DTYPES[settings.compute_dtype]
    index = occurrences if isinstance(occurrences, OccurrenceIndex) else OccurrenceIndex(occurrences)
    if manifest is not None:
        check_layer(layer_path, manifest, layer)
    started = time.perf_counter()
    data = _read_checked(Path(layer_path), index, settings, manifest, units, work)
    with threadpool_limits(limits=threads):
        X = data.stored if data.stored.dtype == work else data.stored.astype(work)  # a float32 layer in float64 work
        try:
            passed = layer_pass(X, data.offsets, work, rogue=settings.geometry)
        except NonFiniteRows as err:  # before any eigen-solve, which would fail naming nothing
            raise non_finite_error(Path(layer_path), layer, X, data.offsets, index, err.row) from None
        # the paper's measures of the stored vectors (variant "none") and of each post-processed variant
        variants = _paper_measures(X, data, passed, index, settings, layer, work)
        none = variants[0]
        exact_self, sampled, primary = _self_similarities(data.stored, index, none.words.self_similarity, settings)
        layer_cis, variant_cis = _bootstrap_intervals(primary, variants, settings, layer)
        panel, rogue = _geometry(data, passed, units, settings, layer)
    # the result: the layer's row, its words, the post-processing rows
    masked = _mev_masked(settings, layer)
    row = _layer_row(data, passed, none, primary, sampled, layer_cis, panel, masked, model=model, layer=layer)
    words = _words_table(index, none, exact_self, sampled, primary, masked, model=model, layer=layer)
    postprocess = _postprocess_rows(variants, variant_cis, settings, model, layer)
    log.info(
        "%s layer %d: self-sim %.3f, intra %.3f, MEV %.3f, baseline cos %.3f (exact %.3f) MEV %.3f (exact %.3f), "
        "%d degenerate words, variants %s (%.1f s)",
        model, layer, row["self_similarity"], row["intra_sentence"], row["mev"], row["baseline_cosine"],
        row["baseline_cosine_exact"], row["baseline_mev"], row["baseline_mev_exact"],
        row["n_degenerate_words"], ",".join(v.transform.name for v in variants), time.perf_counter() - started,
    )  # fmt: skip
    shape = LayerShape(int(data.stored.shape[0]), int(data.stored.shape[1]))
    return LayerResult(row, words, none.words.first_vector, postprocess, rogue, shape)


def _check_settings(settings: MeasureSettings) -> None:
    """What the schema enforces, for direct Python callers, where a wrong value would pass silently."""
    if settings.self_similarity not in SELF_SIMILARITY_MODES:
        raise ValueError(f"self_similarity must be one of {SELF_SIMILARITY_MODES}, got {settings.self_similarity!r}")
    if settings.compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got {settings.compute_dtype!r}")
    unknown = sorted(set(settings.postprocess) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown post-processing {unknown}; expected some of {list(VARIANTS)}")


def _mev_masked(settings: MeasureSettings, layer: int) -> bool:
    """Whether the layer has no MEV: the paper reports none at the input layer."""
    return layer == 0 and not settings.mev_layer0


# --------------------------------------------------------------------------------------------------
# Read and check


def _read_checked(path: Path, index: OccurrenceIndex, settings: MeasureSettings, manifest, units, work) -> _Layer:
    """The one read of the layer (in the compute dtype: every stored value is exact in it), checked against
    the occurrences, the manifest and the units; its storage format's tolerance; the sampled sentences."""
    with LayerReader(path, manifest) as reader:  # with a manifest, its provenance and shards checked too
        stored_dtype = reader.dtype
        wanted = None if np.dtype(work).itemsize < stored_dtype.itemsize else work
        stored, offsets, attrs = reader.rows(dtype=wanted), reader.offsets, dict(reader.handle.attrs)
    if len(index.rows) and index.rows.max() >= len(stored):
        raise StoreError(f"{path}: occurrences refer to row {index.rows.max()} but the file has {len(stored)} rows")
    n_sentences = len(offsets) - 1
    if manifest is not None and n_sentences != manifest["n_sentences"]:
        raise StoreError(f"{path}: {n_sentences} sentences, but the manifest lists {manifest['n_sentences']}")
    if units is not None and len(units) != len(stored):
        raise StoreError(f"{path}: {len(stored)} rows, but units.parquet lists {len(units)}")
    # the storage format's rounding, once per layer (stored values carry its eps whatever they were read as)
    if stored.dtype == stored_dtype or stored_dtype.name not in STORAGE_EPSILON:
        tol = degenerate_tolerance(stored)
    else:
        tol = max(STORAGE_EPSILON[stored_dtype.name] ** 2, DEGENERATE_FLOOR)
    sentence_sample = _rng(settings.seed, _SENTENCE_SAMPLE).permutation(n_sentences)
    intra_ids = sentence_sample if settings.intra_sentences == "all" else sentence_sample[: settings.intra_sentences]
    baseline_ids = sentence_sample[: settings.baseline_samples]
    return _Layer(stored, offsets, int(attrs.get("after_final_norm", 0)), tol, intra_ids, baseline_ids)


# --------------------------------------------------------------------------------------------------
# The paper's measures, of the stored vectors and of each post-processed variant


def _paper_measures(X, data: _Layer, passed: LayerPass, index: OccurrenceIndex, settings: MeasureSettings, layer: int,
                    work) -> list[_Variant]:  # fmt: skip
    """Every variant's measures (``none`` first, then the ``postprocess`` variants in ``VARIANTS`` order),
    from the layer pass, one pass of the variants' unit rows and one pass over the occurrences."""
    names = ["none"] + [name for name in VARIANTS if name in settings.postprocess and name != "none"]
    transforms = [make_transform(name, passed) for name in names]
    sums = {"none": passed.cosines, **cosine_pass(X, data.offsets, transforms[1:], work)}
    words = word_stats(X, index.rows, index.group_starts, transforms, degenerate_tol=data.tol, work_dtype=work)
    masked = _mev_masked(settings, layer)
    variants = []
    for transform in transforms:
        intra, baseline = _sentence_measures(X, data, transform, settings, layer)
        exact = exact_baseline_from_pass(passed, sums[transform.name], transform, data.tol)
        mev = words[transform.name].mev
        variants.append(_Variant(transform, words[transform.name], intra, np.full_like(mev, np.nan) if masked else mev,
                                 baseline, exact))  # fmt: skip
    return variants


def _sentence_measures(X, data: _Layer, transform: Transform, settings: MeasureSettings, layer: int):
    """Intra-sentence similarity of the sampled sentences and the sampled baselines, of one variant."""
    # every variant draws from the stored vectors' stream: the same sentences, rows and pairs are drawn
    rng = _rng(settings.seed, _BASELINE, layer)
    if transform.identity:
        intra = intra_sentence_similarity(X, data.offsets, data.intra_ids)
        return intra, anisotropy_baseline(X, data.offsets, data.baseline_ids, rng, settings.baseline_samples)
    block, local, ids = _sentence_block(X, transform, data.offsets, data.intra_ids)
    intra = intra_sentence_similarity(block, local, ids)
    block, local, ids = _sentence_block(X, transform, data.offsets, data.baseline_ids)
    return intra, anisotropy_baseline(block, local, ids, rng, settings.baseline_samples)


def _sentence_block(X, transform: Transform, offsets, sentence_ids):
    """The rows of the given sentences, transformed (float64), with offsets of their own (sentence k = k)."""
    rows, counts = sentence_rows(offsets, sentence_ids)
    return transform.rows(X[rows], np.float64), np.concatenate([[0], np.cumsum(counts)]), np.arange(len(counts))


def _self_similarities(stored, index: OccurrenceIndex, exact_values, settings: MeasureSettings):
    """Each word's exact and sampled self-similarity (NaN where not asked for), and the one the means use."""
    mode, n_words = settings.self_similarity, len(index.words)
    exact = exact_values if mode in ("exact", "both") else np.full(n_words, np.nan)
    sampled = np.full(n_words, np.nan)
    if mode in ("sampled", "both"):
        # the same stream at every layer: a word gets the same sampled pairs in each layer, as in the paper's code
        pair_rng = _rng(settings.seed, _SAMPLED_PAIRS)
        ends = np.append(index.group_starts[1:], len(index.rows))
        sampled = np.array([
            self_similarity_sampled(np.asarray(stored[index.rows[a:b]], dtype=np.float64), pair_rng, settings.sampled_pairs)
            for a, b in zip(index.group_starts, ends)
        ])  # fmt: skip
    return exact, sampled, sampled if mode == "sampled" else exact


def _mean_or_nan(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else float("nan")


def _measures(self_similarity: np.ndarray, variant: _Variant, masked: bool) -> dict:
    """The layer means of one variant's measures, its baselines and the adjusted values (measure minus
    baseline, sampled and exact): the columns layers.parquet and postprocess.csv share."""
    self_mean, intra_mean, mev_mean = _mean_or_nan(self_similarity), _mean_or_nan(variant.intra), _mean_or_nan(variant.mev)
    baseline, exact, words = variant.baseline, variant.exact, variant.words
    return {
        "self_similarity": self_mean, "intra_sentence": intra_mean, "mev": mev_mean,
        "mev_literal": float("nan") if masked else _mean_or_nan(words.mev_literal),
        "mev_centered": float("nan") if masked else _mean_or_nan(words.mev_centered),
        "baseline_cosine": baseline.cosine, "baseline_mev": baseline.mev,
        "baseline_cosine_exact": exact.cosine, "baseline_mev_exact": exact.mev,
        "adjusted_self_similarity": self_mean - baseline.cosine, "adjusted_intra_sentence": intra_mean - baseline.cosine,
        "adjusted_mev": mev_mean - baseline.mev,
        "adjusted_self_similarity_exact": self_mean - exact.cosine,
        "adjusted_intra_sentence_exact": intra_mean - exact.cosine, "adjusted_mev_exact": mev_mean - exact.mev,
        "n_degenerate_words": int(np.count_nonzero(words.degenerate)),
    }  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Bootstrap intervals


def _bootstrap_mean_ci(values: np.ndarray, rng: np.random.Generator, n_resamples: int) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean (NaNs dropped), as ``reference.bootstrap_ci`` defines it,
    drawn directly with numpy (for the post-processed variants: the same method at a fraction of the cost)."""
    values, trivial = bootstrap_input(values, n_resamples)
    if trivial is not None:
        return trivial
    means = np.empty(n_resamples)
    step = max(1, (1 << 22) // len(values))
    for start in range(0, n_resamples, step):
        count = min(step, n_resamples - start)
        means[start : start + count] = values[rng.integers(0, len(values), size=(count, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _bootstrap_intervals(primary, variants: list[_Variant], settings: MeasureSettings, layer: int):
    """The intervals of the layer's self-similarity, intra-sentence similarity and MEV (one stream, in that
    order), and each post-processing variant's (``none``: the layer's; the others from a stream each)."""
    resamples, none = settings.bootstrap_resamples, variants[0]
    rng = _rng(settings.seed, _BOOTSTRAP, layer)
    layer_cis = tuple(bootstrap_ci(values, rng, resamples) for values in (primary, none.intra, none.mev))
    variant_cis = {}
    for number, variant in enumerate(variants):
        if variant.transform.name not in settings.postprocess:
            continue
        if variant.transform.identity:
            variant_cis[variant.transform.name] = layer_cis
            continue
        rng = _rng(settings.seed, _BOOTSTRAP_VARIANT, layer, number)
        values = (variant.words.self_similarity, variant.intra, variant.mev)
        variant_cis[variant.transform.name] = tuple(_bootstrap_mean_ci(v, rng, resamples) for v in values)
    return layer_cis, variant_cis


def _with_cis(row: dict, cis) -> dict:
    for name, ci in zip(("self_similarity", "intra_sentence", "mev"), cis):
        row[f"{name}_ci_low"], row[f"{name}_ci_high"] = ci
    return row


# --------------------------------------------------------------------------------------------------
# The geometry panel


def _geometry(data: _Layer, passed: LayerPass, units, settings: MeasureSettings, layer: int) -> tuple[dict, np.ndarray]:
    """``panel.geometry_panel``'s row of the layer, its rogue dimensions from the layer pass (weighted by
    the paper's sampling, so that their contributions add up to the exact baseline A_p), and the rogue
    contributions; NaN, "" and 0 without ``settings.geometry``."""
    d = data.stored.shape[1]
    if not settings.geometry:
        return empty_panel(), np.full(d, np.nan)
    labels = positions = None
    if units is not None:
        ordered = units if units["row"].is_monotonic_increasing else units.sort_values("row", kind="stable")
        labels, positions = ordered["unit"].to_numpy(dtype=object), ordered["position"].to_numpy()
    rogue = rogue_summary(passed, d)
    row = panel_row(data.stored, rogue, _rng(settings.seed, _GEOMETRY, layer), settings.geometry_sample, labels,
                    positions, twonn_sample_size=settings.twonn_sample)  # fmt: skip
    return row, rogue.contributions


# --------------------------------------------------------------------------------------------------
# The result


def _postprocess_rows(variants: list[_Variant], cis: dict, settings: MeasureSettings, model: str, layer: int) -> list:
    """One row of postprocess.csv per variant in ``settings.postprocess`` (in ``VARIANTS`` order)."""
    masked = _mev_masked(settings, layer)
    rows = []
    for variant in variants:
        name = variant.transform.name
        if name in cis:
            row = {"model": model, "layer": layer, "postprocess": name,
                   **_measures(variant.words.self_similarity, variant, masked)}  # fmt: skip
            _with_cis(row, cis[name])
            rows.append({column: row[column] for column in POSTPROCESS_COLUMNS})
    return rows


def _layer_row(data: _Layer, passed: LayerPass, none: _Variant, primary, sampled, cis, panel: dict, masked: bool,
               *, model: str, layer: int) -> dict:  # fmt: skip
    """The layer's row of layers.parquet (``LAYER_COLUMNS``). ``n_words``: the words the self-similarity mean
    averages (those with two or more non-zero vectors: a zero vector has no direction, so no cosine);
    ``n_zero_vectors``: the layer's rows of squared norm 0 (in the compute dtype), left out of every cosine."""
    norms = row_norms(data.stored[sentence_rows(data.offsets, data.baseline_ids)[0]])
    row = {
        "model": model, "layer": layer, "n_words": int(np.count_nonzero(~np.isnan(primary))),
        "n_zero_vectors": passed.n_rows - passed.cosines.n_nonzero,
        "n_sentences_sampled": int((~np.isnan(none.intra)).sum()), **_measures(primary, none, masked),
        "norm_mean": _mean_or_nan(norms), "norm_std": float(norms.std()) if len(norms) else float("nan"),
        "self_similarity_sampled": _mean_or_nan(sampled), "n_baseline_vectors": none.baseline.n_vectors,
        "baseline_cosine_exact_between": none.exact.cosine_between, "baseline_cosine_uniform": none.exact.cosine_uniform,
        "after_final_norm": data.after_final_norm, **panel,
    }  # fmt: skip
    _with_cis(row, cis)
    return {column: row[column] for column in LAYER_COLUMNS}


def _words_table(index: OccurrenceIndex, none: _Variant, exact_self, sampled, primary, masked: bool, *, model: str,
                 layer: int) -> pd.DataFrame:  # fmt: skip
    """The layer's rows of words.parquet, plus "primary" (the self-similarity the layer's means use)."""
    mev = none.mev
    return pd.DataFrame({
        "model": model, "word": index.words, "layer": layer, "n": index.counts,
        "self_similarity": exact_self, "self_similarity_sampled": sampled,
        "mev": mev, "mev_literal": np.full_like(mev, np.nan) if masked else none.words.mev_literal,
        "mev_centered": np.full_like(mev, np.nan) if masked else none.words.mev_centered, "primary": primary,
    })  # fmt: skip
