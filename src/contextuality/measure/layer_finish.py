"""The host finish of one layer's measurement: from what the passes over its rows gave (``OnRows``) to
its ``LayerResult``, from host arrays alone.

``layer_job.measure_rows_then`` makes the passes, then ``layer_result`` takes the sampled sentences'
measures and baselines, every variant's exact baselines and paper measures, the geometry panel, the
bootstrap intervals and the tables (a device job runs it in a thread beside its next layer's work). The
random streams (``stream``) are derived from the seed alone, one per purpose (and per layer where the
paper redraws).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from contextuality.core.settings import MeasureSettings
from contextuality.measure.engine.layer_pass import LayerPass, exact_baseline_from_pass, rogue_summary
from contextuality.measure.engine.layer_rows import OccurrenceIndex
from contextuality.measure.engine.panel import empty_panel, panel_row
from contextuality.measure.engine.transforms import Transform
from contextuality.measure.engine.word_stats import WordStats
from contextuality.measure.layer_result import LAYER_COLUMNS, POSTPROCESS_COLUMNS, LayerResult, LayerShape
from contextuality.measure.reference.exact_baseline import ExactBaseline
from contextuality.measure.reference.measures import (
    Baseline,
    anisotropy_baseline,
    bootstrap_ci,
    bootstrap_input,
    intra_sentence_similarity,
    reported,
    row_norms,
    sentence_rows,
)  # fmt: skip

# Sub-seeds of the random streams; each purpose draws from its own stream.
SENTENCE_SAMPLE, BASELINE, SAMPLED_PAIRS, BOOTSTRAP, GEOMETRY, BOOTSTRAP_VARIANT = range(6)


def stream(seed: int, purpose: int, layer: int = 0, *more: int) -> np.random.Generator:
    """The random stream for one purpose (and layer, ...), independent of the order work is done in."""
    return np.random.default_rng([seed, purpose, layer, *more])


class SampledLayer(NamedTuple):
    """A layer's shape and offsets, as its rows say (``LayerRows``), and its sampled sentences."""

    path: Path
    n_rows: int
    d: int
    stored_dtype: str
    offsets: np.ndarray  # sentence offsets
    after_final_norm: int  # the file's attribute (the model's, on a device)
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


class OnRows(NamedTuple):
    """What the passes over a layer's rows give, all of it on the host: the rest needs no row."""

    passed: LayerPass
    transforms: list
    sums: dict  # every variant's unit-row sums
    words: dict  # every variant's WordStats
    sampled: np.ndarray  # sampled self-similarities (NaN unless asked for)
    intra_all: dict  # every sentence's intra-sentence similarity per variant (intra_sentences: all)
    Z: np.ndarray  # the sampled sentences' rows
    z_offsets: np.ndarray
    sampled_ids: np.ndarray
    G: np.ndarray  # the geometry sample's rows
    geometry_rng: np.random.Generator  # the stream the geometry sample was drawn from, to go on drawing
    massive: object  # the massive activations, or None without geometry
    tol: float


class _Measured(NamedTuple):
    """What the measurement gives the layer's result."""

    variants: list
    exact_self: np.ndarray
    sampled: np.ndarray
    primary: np.ndarray
    panel: dict
    rogue: np.ndarray
    baseline_norms: np.ndarray  # the norms of the baseline sentences' rows


def mev_masked(settings: MeasureSettings, layer: int) -> bool:
    """Whether the layer has no MEV: the paper reports none at the input layer."""
    return layer == 0 and not settings.mev_layer0


def layer_result(on_rows: OnRows, data: SampledLayer, index: OccurrenceIndex, units, settings: MeasureSettings, *,
                 model: str, layer: int, log: logging.Logger, started: float) -> LayerResult:  # fmt: skip
    """The ``LayerResult`` from what the passes gave (``OnRows``), from host arrays alone: the sampled
    baselines, the geometry panel's isotropy measures, the bootstrap intervals, the tables. ``started``: when
    the layer's measurement began (``time.perf_counter``), for the log line."""
    measured = _finish(on_rows, data, units, settings, layer)
    variants, exact_self, sampled, primary, panel, rogue, baseline_norms = measured
    none = variants[0]
    layer_cis, variant_cis = _bootstrap_intervals(primary, variants, settings, layer)
    # the result: the layer's row, its words, the post-processing rows
    masked = mev_masked(settings, layer)
    row = _layer_row(data, baseline_norms, none, primary, sampled, layer_cis, panel, masked, model=model, layer=layer)
    words = _words_table(index, none, exact_self, sampled, primary, masked, model=model, layer=layer)
    postprocess = _postprocess_rows(variants, variant_cis, settings, model, layer)
    log.info(
        "%s layer %d: self-sim %.3f, intra %.3f, MEV %.3f, baseline cos %.3f (exact %.3f) MEV %.3f (exact %.3f), "
        "%d degenerate words, variants %s (%.1f s)",
        model, layer, row["self_similarity"], row["intra_sentence"], row["mev"], row["baseline_cosine"],
        row["baseline_cosine_exact"], row["baseline_mev"], row["baseline_mev_exact"],
        row["n_degenerate_words"], ",".join(v.transform.name for v in variants), time.perf_counter() - started,
    )  # fmt: skip
    return LayerResult(row, words, none.words.first_vector, postprocess, rogue, LayerShape(data.n_rows, data.d))


def _finish(on: OnRows, data: SampledLayer, units, settings: MeasureSettings, layer: int) -> _Measured:
    """The measures taken on the host from what the passes gave: the sampled sentences' measures, every
    variant's exact baselines, the geometry panel."""
    transforms, Z, z_offsets, sampled_ids = on.transforms, on.Z, on.z_offsets, on.sampled_ids
    every_intra = settings.intra_sentences == "all"
    position = {"baseline": np.searchsorted(sampled_ids, data.baseline_ids),
                "intra": None if every_intra else np.searchsorted(sampled_ids, data.intra_ids)}  # fmt: skip
    sentences = {}
    for t in transforms:
        intra_ids = position["baseline"] if every_intra else position["intra"]  # ``all``: replaced below
        intra, baseline = _sentence_measures(Z, z_offsets, intra_ids, position["baseline"], t, settings, layer)
        sentences[t.name] = (on.intra_all[t.name][data.intra_ids] if every_intra else intra, baseline)
    variants = _paper_measures(transforms, on.passed, on.sums, on.words, sentences, on.tol, settings, layer)
    exact_self, sampled, primary = _self_similarities(variants[0].words.self_similarity, on.sampled, settings)
    panel, rogue = _geometry(data, on.passed, units, settings, layer, rng=on.geometry_rng, massive=on.massive,
                             sample=on.G)  # fmt: skip
    norms = row_norms(Z[sentence_rows(z_offsets, position["baseline"])[0]])
    return _Measured(variants, exact_self, sampled, primary, panel, rogue, norms)


def _paper_measures(transforms, passed: LayerPass, sums: dict, words: dict, sentences: dict, tol: float,
                    settings: MeasureSettings, layer: int) -> list[_Variant]:  # fmt: skip
    """Every variant's measures from the layer pass, the variants' unit-row sums, their words and their
    sampled sentences' measures (``_sentence_measures``)."""
    masked = mev_masked(settings, layer)
    variants = []
    for transform in transforms:
        intra, baseline = sentences[transform.name]
        exact = exact_baseline_from_pass(passed, sums[transform.name], transform, tol)
        mev = words[transform.name].mev
        variants.append(_Variant(transform, words[transform.name], intra, np.full_like(mev, np.nan) if masked else mev,
                                 baseline, exact))  # fmt: skip
    return variants


def _sentence_measures(X, offsets, intra_ids, baseline_ids, transform: Transform, settings: MeasureSettings,
                       layer: int):  # fmt: skip
    """Intra-sentence similarity of the sampled sentences and the sampled baselines, of one variant."""
    # every variant draws from the stored vectors' stream: the same sentences, rows and pairs are drawn
    rng = stream(settings.seed, BASELINE, layer)
    if transform.identity:
        intra = intra_sentence_similarity(X, offsets, intra_ids)
        return intra, anisotropy_baseline(X, offsets, baseline_ids, rng, settings.baseline_samples)
    block, local, ids = _sentence_block(X, transform, offsets, intra_ids)
    intra = intra_sentence_similarity(block, local, ids)
    block, local, ids = _sentence_block(X, transform, offsets, baseline_ids)
    return intra, anisotropy_baseline(block, local, ids, rng, settings.baseline_samples)


def _sentence_block(X, transform: Transform, offsets, sentence_ids):
    """The rows of the given sentences, transformed (float64), with offsets of their own (sentence k = k)."""
    rows, counts = sentence_rows(offsets, sentence_ids)
    return transform.rows(X[rows], np.float64), np.concatenate([[0], np.cumsum(counts)]), np.arange(len(counts))


def _self_similarities(exact_values: np.ndarray, sampled: np.ndarray, settings: MeasureSettings):
    """Each word's exact and sampled self-similarity (NaN where not asked for), and the one the means use."""
    mode = settings.self_similarity
    exact = exact_values if mode in ("exact", "both") else np.full(len(exact_values), np.nan)
    return exact, sampled, sampled if mode == "sampled" else exact


def _mean_or_nan(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else float("nan")


def _measures(self_similarity: np.ndarray, variant: _Variant, masked: bool) -> dict:
    """The layer means of one variant's measures, its baselines and the adjusted values (measure minus
    baseline, sampled and exact): the columns layers.parquet and postprocess.csv share."""
    self_mean, intra_mean, mev_mean = (
        _mean_or_nan(self_similarity),
        _mean_or_nan(variant.intra),
        _mean_or_nan(variant.mev),
    )
    baseline, exact, words = reported(variant.baseline), variant.exact, variant.words  # N/A from too few vectors
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
    rng = stream(settings.seed, BOOTSTRAP, layer)
    layer_cis = tuple(bootstrap_ci(values, rng, resamples) for values in (primary, none.intra, none.mev))
    variant_cis = {}
    for number, variant in enumerate(variants):
        if variant.transform.name not in settings.postprocess:
            continue
        if variant.transform.identity:
            variant_cis[variant.transform.name] = layer_cis
            continue
        rng = stream(settings.seed, BOOTSTRAP_VARIANT, layer, number)
        values = (variant.words.self_similarity, variant.intra, variant.mev)
        variant_cis[variant.transform.name] = tuple(_bootstrap_mean_ci(v, rng, resamples) for v in values)
    return layer_cis, variant_cis


def _with_cis(row: dict, cis) -> dict:
    for name, ci in zip(("self_similarity", "intra_sentence", "mev"), cis):
        row[f"{name}_ci_low"], row[f"{name}_ci_high"] = ci
    return row


# --------------------------------------------------------------------------------------------------
# The geometry panel


def _geometry(data: SampledLayer, passed: LayerPass, units, settings: MeasureSettings, layer: int, *, rng, massive,
              sample) -> tuple[dict, np.ndarray]:  # fmt: skip
    """``panel.geometry_panel``'s row of the layer, its rogue dimensions from the layer pass (weighted by
    the paper's sampling, so that their contributions add up to the exact baseline A_p), and the rogue
    contributions; NaN, "" and 0 without ``settings.geometry``. ``massive``: the layer's massive activations,
    ``sample``: its geometry rows (on the host), drawn from ``rng`` before it is passed here."""
    if not settings.geometry:
        return empty_panel(), np.full(data.d, np.nan)
    labels = positions = None
    if units is not None:
        ordered = units if units["row"].is_monotonic_increasing else units.sort_values("row", kind="stable")
        labels, positions = ordered["unit"].to_numpy(dtype=object), ordered["position"].to_numpy()
    rogue = rogue_summary(passed, data.d)
    row = panel_row(None, rogue, rng, settings.geometry_sample, labels, positions, twonn_sample_size=settings.twonn_sample,
                    massive=massive, sample=sample)  # fmt: skip
    return row, rogue.contributions


# --------------------------------------------------------------------------------------------------
# The result


def _postprocess_rows(variants: list[_Variant], cis: dict, settings: MeasureSettings, model: str, layer: int) -> list:
    """One row of postprocess.csv per variant in ``settings.postprocess`` (in ``VARIANTS`` order)."""
    masked = mev_masked(settings, layer)
    rows = []
    for variant in variants:
        name = variant.transform.name
        if name in cis:
            row = {"model": model, "layer": layer, "postprocess": name,
                   **_measures(variant.words.self_similarity, variant, masked)}  # fmt: skip
            _with_cis(row, cis[name])
            rows.append({column: row[column] for column in POSTPROCESS_COLUMNS})
    return rows


def _layer_row(data: SampledLayer, norms: np.ndarray, none: _Variant, primary, sampled, cis, panel: dict, masked: bool,
               *, model: str, layer: int) -> dict:  # fmt: skip
    """The layer's row of layers.parquet (``LAYER_COLUMNS``). ``n_words``: the words the self-similarity mean
    averages (those with two or more non-zero vectors: a zero vector has no direction, so no cosine);
    ``n_zero_vectors``: the layer's rows of squared norm 0 (in the compute dtype), left out of every cosine."""
    row = {
        "model": model, "layer": layer, "n_words": int(np.count_nonzero(~np.isnan(primary))),
        "n_zero_vectors": data.n_rows - none.exact.n_vectors,
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
