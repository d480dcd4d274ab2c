"""The measurement job: one layer's rows in, every measure of that layer out (a ``LayerResult``).

``measure_rows`` is the one measurement path. It takes a layer's rows (``LayerRows``) as chunks of whole
sentences, once per pass: a layer file read whole into memory is one chunk, a larger one is read in
chunks within ``metrics.memory_mb`` (its occurrences spilled to a scratch file, ``streaming``), and a layer
resident on a GPU (``device_job``) is one chunk there. The engine (``layer_pass``, ``word_stats``,
``sentences``, the massive activations of ``rogue``) runs on the rows' own backend (``backend``: numpy or
torch), in the compute dtype (float32 by default; sums over rows and every self-similarity in float64):
the paper's measures, the exact baselines, the degenerate words, the paper's measures of post-processed
variants, the geometry beyond the paper (``panel``) and the bootstrap intervals. Random draws come from
streams derived from one seed, one per purpose (and per layer where the paper redraws), made on the host
from the plan alone, never from the order the layers are measured in or where their rows are; the drawn
rows are copied to the host and measured by the numpy reference code, so a rerun with the same seed
writes byte-identical files. ``measure_layer`` (the workflow's job per (model, layer)) reads a layer file
into ``LayerRows``; ``combine.combine_layers`` then joins the per-layer results into the model's tables.
Outputs follow docs/data-contract.md. Here: the passes over the rows; the rows themselves are in
``layer_rows``, and the measures taken on the host from what the passes gave in ``layer_finish``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality.core.runtime import collection_paused
from contextuality.core.settings import MeasureSettings
from contextuality.measure.engine import backend
from contextuality.measure.engine.backend import COMPUTE_DTYPES
from contextuality.measure.engine.finite import non_finite_error
from contextuality.measure.engine.layer_pass import (
    SHIFT_ROWS,
    CosinePassSums,
    LayerPass,
    LayerPassSums,
    NonFiniteRows,
    layer_shift,
    make_transform,
)  # fmt: skip
from contextuality.measure.engine.layer_rows import LayerRows, OccurrenceIndex, RowsInChunks, RowsInMemory
from contextuality.measure.engine.rogue import largest_magnitude, massive_activations_blocks
from contextuality.measure.engine.sentences import intra_sentence_by_length
from contextuality.measure.engine.streaming import gather, plan_memory, word_groups
from contextuality.measure.engine.transforms import VARIANTS, Transform
from contextuality.measure.engine.word_stats import WordStats, word_stats
from contextuality.measure.layer_finish import (
    GEOMETRY,
    SAMPLED_PAIRS,
    SENTENCE_SAMPLE,
    OnRows,
    SampledLayer,
    layer_result,
    stream,
)  # fmt: skip
from contextuality.measure.layer_result import LayerResult
from contextuality.measure.reference.isotropy import sample_indices
from contextuality.measure.reference.measures import self_similarity_sampled, sentence_rows
from contextuality.measure.reference.word_pcs import DEGENERATE_FLOOR, STORAGE_EPSILON, degenerate_tolerance
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader, check_layer

LOG = logging.getLogger(__name__)

SELF_SIMILARITY_MODES = ("exact", "sampled", "both")
# The layer's first rows that tell its storage format's rounding (``_tolerance``).
TOLERANCE_ROWS = 1024


def read_units(path: str | Path) -> pd.DataFrame:
    """units.parquet's row, unit and position columns, each unit's text held once (a categorical column),
    not once per row: the geometry panel names the units carrying massive activations."""
    return pq.read_table(path, columns=["row", "unit", "position"], read_dictionary=["unit"]).to_pandas()


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
    scratch: Path | None = None,
    log: logging.Logger = LOG,
) -> LayerResult:
    """Every measure of one layer, from one read of its file (see ``LayerResult``).

    The paper's measures: ``settings.intra_sentences`` sentences (or ``"all"``) are averaged for
    intra-sentence similarity and ``baseline_samples`` sentences feed the sampled baselines (and
    ``baseline_samples`` pairs the cosine baseline); both sets are prefixes of one seeded permutation of
    the sentences, the same for every layer (as the paper's code drew them). ``self_similarity`` chooses the
    exact all-pairs mean, the paper's sampled estimate (at most ``sampled_pairs`` ordered pairs), or both; the per-layer
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
    Memory: a layer whose rows fit ``settings.memory_mb`` is read once, whole (one chunk); a larger one is
    read in chunks, once per pass, its occurrences spilled to a scratch file in ``scratch`` (default: the
    system's temporary folder). Both are ``measure_rows``, the one path a device's resident layer takes too.
    """
    _check_settings(settings)
    work = COMPUTE_DTYPES[settings.compute_dtype]
    index = occurrences if isinstance(occurrences, OccurrenceIndex) else OccurrenceIndex(occurrences)
    if manifest is not None:
        check_layer(layer_path, manifest, layer)
    with LayerReader(Path(layer_path), manifest) as reader, threadpool_limits(limits=threads):
        # with a manifest, its provenance and shards are checked too
        n_rows, d = (int(v) for v in reader.shape)
        _check_against(Path(layer_path), reader.offsets, n_rows, index, manifest, units)
        read_dtype = reader.dtype if np.dtype(work).itemsize < reader.dtype.itemsize else np.dtype(work)
        plan = plan_memory(n_rows, d, read_dtype.itemsize, settings.memory_mb)
        log.info("%s layer %d: %d x %d, %s (metrics.memory_mb %d)", model, layer, n_rows, d, plan.describe(),
                 settings.memory_mb)  # fmt: skip
        after_final_norm = int(reader.handle.attrs.get("after_final_norm", 0))
        if plan.whole:  # the rows in the compute dtype (every stored value is exact in it), read once
            rows = RowsInMemory(reader.rows(dtype=read_dtype), reader.offsets, path=layer_path,
                                stored_dtype=reader.dtype, after_final_norm=after_final_norm)  # fmt: skip
        else:
            rows = RowsInChunks(reader, plan, index, path=layer_path, after_final_norm=after_final_norm,
                                scratch=scratch)  # fmt: skip
        try:
            return measure_rows(rows, layer, index, settings, model=model, units=units, log=log)
        finally:
            rows.close()


def measure_rows(rows: LayerRows, layer: int, index: OccurrenceIndex, settings: MeasureSettings, *, model: str,
                 units: pd.DataFrame | None = None, log: logging.Logger = LOG) -> LayerResult:  # fmt: skip
    """Every measure of one layer from its rows (``LayerRows``: a layer file in memory or in chunks, or a
    layer resident on a device), on the rows' own backend; see ``measure_layer``. The seeded draws are made
    on the host from the plan alone and the drawn rows copied there, so they and every measure taken on
    them are the same bytes whatever holds the rows."""
    return measure_rows_then(rows, layer, index, settings, model=model, units=units, log=log)()


def measure_rows_then(rows: LayerRows, layer: int, index: OccurrenceIndex, settings: MeasureSettings, *, model: str,
                      units: pd.DataFrame | None = None, log: logging.Logger = LOG):  # fmt: skip
    """``measure_rows`` in two steps: everything that reads the rows, now (the passes, the words, the massive
    activations, the drawn rows copied to the host), and a function giving the ``LayerResult`` from host
    arrays alone (the sampled baselines, the geometry panel's isotropy measures, the bootstrap intervals, the
    tables), which a device job runs in a thread beside its next layer's work."""
    _check_settings(settings)
    started = time.perf_counter()
    data = _sampled(rows, settings)
    on_rows = _measure(rows, data, index, settings, layer, COMPUTE_DTYPES[settings.compute_dtype])

    def result() -> LayerResult:
        return layer_result(on_rows, data, index, units, settings, model=model, layer=layer, log=log, started=started)

    return result


def _measure(rows: LayerRows, data: SampledLayer, index: OccurrenceIndex, settings: MeasureSettings, layer: int,
             work) -> OnRows:  # fmt: skip
    """The one measurement path's work on the rows, over ``rows.passes()`` (one chunk for a layer in memory).

    Pass 1: the moments and unit-row sums (``LayerPassSums``), the occurrences kept (``rows.keep``), the
    sampled sentences' and geometry rows gathered to the host, whether any entry is above the massive
    threshold. Pass 2 (with post-processing variants, or intra-sentence similarity over ``all``
    sentences): the variants' unit-row sums and the intra-sentence similarities. Then the words, a group
    at a time (one group when the rows are in memory); the massive activations take two more passes only
    where some entry is above 100.
    """
    n, d, offsets = data.n_rows, data.d, data.offsets
    every_intra = settings.intra_sentences == "all"
    # the sampled sentences in one compact host block: ids are positions in ``sampled``
    sampled_ids = np.union1d(data.baseline_ids, [] if every_intra else data.intra_ids).astype(np.int64)
    z_rows, z_counts = sentence_rows(offsets, sampled_ids)
    Z = np.empty((len(z_rows), d), dtype=data.stored_dtype)
    z_offsets = np.concatenate([[0], np.cumsum(z_counts)]).astype(np.int64)
    geometry_rng = stream(settings.seed, GEOMETRY, layer)
    geometry_rows = np.empty(0, dtype=np.int64)
    if settings.geometry:
        drawn = sample_indices(n, geometry_rng, settings.geometry_sample)
        geometry_rows = np.arange(n) if drawn is None else drawn
    G = np.empty((len(geometry_rows), d), dtype=data.stored_dtype)
    first = rows.first_rows(SHIFT_ROWS)
    shift = _checked(lambda: layer_shift(first), rows, data, index, layer, first, 0)  # noqa: F821  (called at once)
    tol = _tolerance(data, backend.to_host(first[:TOLERANCE_ROWS, :]))
    del first
    sums = LayerPassSums(int(np.count_nonzero(np.diff(offsets))), shift, work, rows.block_rows, rogue=settings.geometry)
    any_above, read_dtype = False, None
    for chunk in rows.passes(desc=f"layer {layer}: moments"):
        _checked(lambda: sums.add(chunk.rows, chunk.offsets, chunk.first_row), rows, data, index, layer, chunk.rows,  # noqa: B023
                 chunk.first_row)  # fmt: skip
        rows.keep(chunk)
        gather(z_rows, chunk, Z)
        gather(geometry_rows, chunk, G)
        read_dtype = chunk.rows.dtype
        if settings.geometry and not any_above:  # the same test in any dtype that holds the values
            any_above = largest_magnitude(lambda: [(chunk.first_row, chunk.rows)], chunk.rows.dtype)  # noqa: B023
    passed = sums.result()
    transforms = _transforms(passed, settings)
    cosine_sums = CosinePassSums(passed.n_sentences, d, transforms[1:], work, rows.block_rows)
    intra_all = {t.name: np.full(len(offsets) - 1, np.nan) for t in transforms} if every_intra else {}
    if len(transforms) > 1 or every_intra:
        for chunk in rows.passes(desc=f"layer {layer}: variants"):
            cosine_sums.add(chunk.rows, chunk.offsets)
            for t in transforms if every_intra else []:
                intra_all[t.name][chunk.s0 : chunk.s1] = intra_sentence_by_length(chunk.rows, chunk.offsets, t)
    sums_by_name = {"none": passed.cosines, **cosine_sums.result()}
    words, sampled = _words(rows, index, transforms, tol, settings, work)
    massive = None
    if settings.geometry:
        # in the dtype the rows are held in (a threshold rounded up to it compares exactly as in any wider one)
        massive = massive_activations_blocks(lambda: ((c.first_row, c.rows) for c in rows.passes()), n, d,
                                             read_dtype or data.stored_dtype, any_above=any_above)  # fmt: skip
    return OnRows(passed, transforms, sums_by_name, words, sampled, intra_all, Z, z_offsets, sampled_ids, G,
                   geometry_rng, massive, tol)  # fmt: skip


def _checked(step, rows: LayerRows, data: SampledLayer, index: OccurrenceIndex, layer: int, X, first_row: int):
    """``step()``, a ``NonFiniteRows`` it raises turned into the one line naming the row (``finite``)."""
    try:
        return step()
    except NonFiniteRows as err:  # before any eigen-solve, which would fail naming nothing
        raise non_finite_error(rows.path, layer, backend.to_host(X), data.offsets, index, err.row, first_row=first_row,
                               sentence_ids=rows.sentence_ids, remedy=rows.remedy) from None  # fmt: skip


def _words(rows: LayerRows, index: OccurrenceIndex, transforms, tol: float, settings: MeasureSettings, work):
    """``word_stats`` of every variant and the sampled self-similarities, a group of words at a time
    (``rows.word_rows``; one group for rows in memory)."""
    limit = len(index.rows) if isinstance(rows, RowsInMemory) else rows.spill_group_rows
    groups = word_groups(index.group_starts, len(index.rows), limit)
    parts, sampled_parts = [], []
    pair_rng = stream(settings.seed, SAMPLED_PAIRS)  # one stream over the words in order
    ends = np.append(index.group_starts[1:], len(index.rows))
    for w0, w1 in tqdm(groups, desc="words", disable=None if len(groups) > 1 else True, leave=False):
        first, last = int(index.group_starts[w0]), int(ends[w1 - 1])
        X, positions = rows.word_rows(first, last, index)
        starts = index.group_starts[w0:w1] - first
        parts.append(word_stats(X, positions, starts, transforms, degenerate_tol=tol, work_dtype=work))
        if settings.self_similarity in ("sampled", "both"):  # on a host copy of each word's rows, as drawn
            local_ends = np.append(starts[1:], last - first)
            sampled_parts.append([
                self_similarity_sampled(backend.to_host(backend.take_rows(X, positions[a:b])).astype(np.float64),
                                        pair_rng, settings.sampled_pairs)
                for a, b in zip(starts, local_ends)
            ])  # fmt: skip
    words = {t.name: _concatenate_word_stats([part[t.name] for part in parts]) for t in transforms}
    sampled = (
        np.array([v for part in sampled_parts for v in part]) if sampled_parts else np.full(len(index.words), np.nan)
    )
    return words, sampled


def _concatenate_word_stats(parts: list[WordStats]) -> WordStats:
    if not parts:
        raise ValueError("no words to measure")
    fields = []
    for name in WordStats._fields:
        values = [getattr(part, name) for part in parts]
        fields.append(None if values[0] is None else np.concatenate(values))
    return WordStats(*fields)


def _check_settings(settings: MeasureSettings) -> None:
    """What the schema enforces, for direct Python callers, where a wrong value would pass silently."""
    if settings.self_similarity not in SELF_SIMILARITY_MODES:
        raise ValueError(f"self_similarity must be one of {SELF_SIMILARITY_MODES}, got {settings.self_similarity!r}")
    if settings.compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got {settings.compute_dtype!r}")
    unknown = sorted(set(settings.postprocess) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown post-processing {unknown}; expected some of {list(VARIANTS)}")


# --------------------------------------------------------------------------------------------------
# Read and check


def _check_against(path: Path, offsets: np.ndarray, n_rows: int, index: OccurrenceIndex, manifest, units) -> None:
    """The layer's rows and offsets checked against the occurrences, the manifest and the units."""
    if len(index.rows) and index.rows.max() >= n_rows:
        raise StoreError(f"{path}: occurrences refer to row {index.rows.max()} but the file has {n_rows} rows")
    n_sentences = len(offsets) - 1
    if manifest is not None and n_sentences != manifest["n_sentences"]:
        raise StoreError(f"{path}: {n_sentences} sentences, but the manifest lists {manifest['n_sentences']}")
    if units is not None and len(units) != n_rows:
        raise StoreError(f"{path}: {n_rows} rows, but units.parquet lists {len(units)}")


def _sampled(rows: LayerRows, settings: MeasureSettings) -> SampledLayer:
    """The layer's shape and the sampled sentences: prefixes of one seeded permutation, from the plan alone."""
    n_sentences = len(rows.offsets) - 1
    sentence_sample = stream(settings.seed, SENTENCE_SAMPLE).permutation(n_sentences)
    intra_ids = sentence_sample if settings.intra_sentences == "all" else sentence_sample[: settings.intra_sentences]
    baseline_ids = sentence_sample[: settings.baseline_samples]
    return SampledLayer(rows.path, rows.n_rows, rows.d, rows.stored_dtype, rows.offsets, rows.after_final_norm,
                        intra_ids, baseline_ids)  # fmt: skip


def _tolerance(data: SampledLayer, first_rows: np.ndarray) -> float:
    """The storage format's rounding (``word_pcs.degenerate_tolerance``): the coarsest format that holds the
    layer's first rows exactly (a bfloat16 model's float16 store carries bfloat16's rounding), never finer
    than the format the rows are stored in."""
    stored = STORAGE_EPSILON.get(data.stored_dtype)
    found = degenerate_tolerance(first_rows)
    return found if stored is None else max(found, stored**2, DEGENERATE_FLOOR)


# --------------------------------------------------------------------------------------------------
# The paper's measures, of the stored vectors and of each post-processed variant


def _transforms(passed: LayerPass, settings: MeasureSettings) -> list[Transform]:
    """``none`` first, then the ``postprocess`` variants in ``VARIANTS`` order."""
    names = ["none"] + [name for name in VARIANTS if name in settings.postprocess and name != "none"]
    return [make_transform(name, passed) for name in names]
