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
Outputs follow docs/data-contract.md.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality.core.runtime import collection_paused
from contextuality.core.settings import MeasureSettings
from contextuality.measure import backend
from contextuality.measure.exact_baseline import ExactBaseline
from contextuality.measure.finite import non_finite_error
from contextuality.measure.isotropy import sample_indices
from contextuality.measure.layer_pass import (
    BLOCK_ROWS, SHIFT_ROWS, CosinePassSums, LayerPass, LayerPassSums, NonFiniteRows, exact_baseline_from_pass,
    layer_shift, make_transform, rogue_summary,
)  # fmt: skip
from contextuality.measure.layer_result import LAYER_COLUMNS, POSTPROCESS_COLUMNS, LayerResult, LayerShape
from contextuality.measure.panel import empty_panel, panel_row
from contextuality.measure.reference import (
    Baseline, anisotropy_baseline, bootstrap_ci, bootstrap_input, intra_sentence_similarity, reported, row_norms,
    self_similarity_sampled, sentence_rows,
)  # fmt: skip
from contextuality.measure.rogue import largest_magnitude, massive_activations_blocks
from contextuality.measure.sentences import intra_sentence_by_length
from contextuality.measure.streaming import (
    Chunk, MemoryPlan, OccurrenceSpill, gather, plan_memory, read_chunks, sentence_chunks, word_groups,
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
# The layer's first rows that tell its storage format's rounding (``_tolerance``).
TOLERANCE_ROWS = 1024


def _rng(seed: int, purpose: int, layer: int = 0, *more: int) -> np.random.Generator:
    """The random stream for one purpose (and layer, ...), independent of the order work is done in."""
    return np.random.default_rng([seed, purpose, layer, *more])


class OccurrenceIndex:
    """The occurrences of one model as the measures need them: rows grouped by word (sorted by word, row)."""

    def __init__(self, occurrences: pd.DataFrame):
        occurrences = occurrences.sort_values(["word", "row"], kind="stable")
        self._set(occurrences["word"].to_numpy(), occurrences["row"].to_numpy(dtype=np.int64))

    def _set(self, word_of_row: np.ndarray, rows: np.ndarray) -> None:
        self.rows = rows
        self.group_starts = np.flatnonzero(np.concatenate([[len(self.rows) > 0], word_of_row[1:] != word_of_row[:-1]]))
        self.words = word_of_row[self.group_starts]
        self.counts = group_sizes(self.group_starts, len(self.rows))

    @classmethod
    def from_parquet(cls, path: str | Path) -> OccurrenceIndex:
        """From occurrences.parquet: only its word and row columns, each word's text held once (a dictionary),
        not once per occurrence, so that the index costs about 16 bytes per occurrence; the same index as
        ``OccurrenceIndex(pd.read_parquet(path))``."""
        table = pq.read_table(path, columns=["word", "row"], read_dictionary=["word"])
        words = table.column("word").combine_chunks()
        texts = np.asarray(words.dictionary.to_pylist(), dtype=object)
        rank = np.empty(len(texts), dtype=np.int64)
        rank[np.argsort(texts, kind="stable")] = np.arange(len(texts))  # a word's place in text order
        keys = rank[words.indices.to_numpy(zero_copy_only=False)]
        rows = table.column("row").to_numpy().astype(np.int64)
        del table, words
        order = np.lexsort((rows, keys))  # by word, then row: sort_values(["word", "row"])
        index = cls.__new__(cls)
        keys, rows = keys[order], rows[order]
        index._set(keys, rows)
        index.words = texts[np.argsort(rank)][index.words]  # ranks back to the texts
        return index


def read_units(path: str | Path) -> pd.DataFrame:
    """units.parquet's row, unit and position columns, each unit's text held once (a categorical column),
    not once per row: the geometry panel names the units carrying massive activations."""
    return pq.read_table(path, columns=["row", "unit", "position"], read_dictionary=["unit"]).to_pandas()


class _Layer(NamedTuple):
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


class LayerRows:
    """Where one layer's rows come from, for the one measurement path (``measure_rows``).

    ``passes()`` gives every row once per call, in chunks of whole sentences (``streaming.Chunk``), as
    arrays of one backend (``backend``: numpy on the host, torch on a device). ``keep`` sees each chunk
    of the first pass (a layer read in chunks spills its occurrences); ``word_rows`` then gives a range
    of the word-grouped occurrences: an array and the positions of the range's rows in it.
    """

    path: Path  # the layer file, or what the rows are (messages)
    n_rows: int
    d: int
    stored_dtype: str  # the format the vectors are stored in (its rounding: the degenerate tolerance)
    offsets: np.ndarray
    after_final_norm: int
    block_rows: int = BLOCK_ROWS  # rows per block of the full-layer passes
    sentence_ids: np.ndarray | None = None  # corpus ids of the sentences (messages), when not in ``path``
    remedy: str | None = None  # the way out of a non-finite row (``finite.non_finite_error``'s when None)

    def passes(self, desc: str | None = None):
        raise NotImplementedError

    def first_rows(self, count: int):
        raise NotImplementedError

    def keep(self, chunk: Chunk) -> None:
        """See a chunk of the first pass (nothing to do unless the rows are read again from a spill)."""

    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        raise NotImplementedError

    def close(self) -> None:
        """Let go of what the rows hold (a spill file)."""


class RowsInMemory(LayerRows):
    """A layer held whole (numpy on the host, or a tensor on a device): one chunk, gathers by index."""

    def __init__(self, X, offsets: np.ndarray, *, path, stored_dtype, after_final_norm: int = 0,
                 block_rows: int = BLOCK_ROWS, sentence_ids: np.ndarray | None = None, remedy: str | None = None):  # fmt: skip
        self.X, self.path, self.offsets = X, Path(path), np.asarray(offsets, dtype=np.int64)
        self.n_rows, self.d = int(X.shape[0]), int(X.shape[1])
        self.stored_dtype, self.after_final_norm = backend.dtype_name(stored_dtype), after_final_norm
        self.block_rows, self.sentence_ids, self.remedy = block_rows, sentence_ids, remedy

    def passes(self, desc: str | None = None):
        yield Chunk(0, self.X, self.offsets, 0, len(self.offsets) - 1)

    def first_rows(self, count: int):
        return self.X[:count, :]

    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        return self.X, index.rows[first:last]


class RowsInChunks(LayerRows):
    """A layer file read in chunks of whole sentences, once per pass, its occurrences spilled word by word to
    a scratch file in the first pass (``streaming``): memory within the budget whatever the layer's size."""

    def __init__(self, reader, plan: MemoryPlan, index: OccurrenceIndex, *, path, after_final_norm: int, scratch):
        self.reader, self.path, self.offsets = reader, Path(path), reader.offsets
        self.n_rows, self.d = (int(v) for v in reader.shape)
        self.stored_dtype, self.after_final_norm = backend.dtype_name(reader.dtype), after_final_norm
        self.chunks = sentence_chunks(self.offsets, plan.chunk_rows)
        self.spill = OccurrenceSpill(index.rows, self.n_rows, self.d, reader.dtype, scratch)
        self.spill_group_rows = plan.group_rows

    def passes(self, desc: str | None = None):  # in the stored dtype: every block a pass takes is converted as taken
        chunks = read_chunks(self.reader, self.offsets, self.chunks)
        yield from tqdm(chunks, total=len(self.chunks), desc=desc, disable=None if desc else True, leave=False)

    def first_rows(self, count: int):
        """The layer's first rows (the point its moments are taken around)."""
        return self.reader.rows(0, min(count, self.n_rows))

    def keep(self, chunk: Chunk) -> None:
        self.spill.add(chunk)

    def word_rows(self, first: int, last: int, index: OccurrenceIndex):
        return self.spill.read(first, last, self.spill.dtype), np.arange(last - first)

    def close(self) -> None:
        self.spill.close()


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
        measured = _finish(on_rows, data, units, settings, layer)
        variants, exact_self, sampled, primary, panel, rogue, baseline_norms = measured
        none = variants[0]
        layer_cis, variant_cis = _bootstrap_intervals(primary, variants, settings, layer)
        # the result: the layer's row, its words, the post-processing rows
        masked = _mev_masked(settings, layer)
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

    return result


class _OnRows(NamedTuple):
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


def _measure(rows: LayerRows, data: _Layer, index: OccurrenceIndex, settings: MeasureSettings, layer: int,
             work) -> _OnRows:  # fmt: skip
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
    geometry_rng = _rng(settings.seed, _GEOMETRY, layer)
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
    return _OnRows(passed, transforms, sums_by_name, words, sampled, intra_all, Z, z_offsets, sampled_ids, G,
                   geometry_rng, massive, tol)  # fmt: skip


def _finish(on: _OnRows, data: _Layer, units, settings: MeasureSettings, layer: int) -> _Measured:
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


def _checked(step, rows: LayerRows, data: _Layer, index: OccurrenceIndex, layer: int, X, first_row: int):
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
    pair_rng = _rng(settings.seed, _SAMPLED_PAIRS)  # one stream over the words in order
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
    sampled = np.array([v for part in sampled_parts for v in part]) if sampled_parts else np.full(len(index.words), np.nan)
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


def _mev_masked(settings: MeasureSettings, layer: int) -> bool:
    """Whether the layer has no MEV: the paper reports none at the input layer."""
    return layer == 0 and not settings.mev_layer0


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


def _sampled(rows: LayerRows, settings: MeasureSettings) -> _Layer:
    """The layer's shape and the sampled sentences: prefixes of one seeded permutation, from the plan alone."""
    n_sentences = len(rows.offsets) - 1
    sentence_sample = _rng(settings.seed, _SENTENCE_SAMPLE).permutation(n_sentences)
    intra_ids = sentence_sample if settings.intra_sentences == "all" else sentence_sample[: settings.intra_sentences]
    baseline_ids = sentence_sample[: settings.baseline_samples]
    return _Layer(rows.path, rows.n_rows, rows.d, rows.stored_dtype, rows.offsets, rows.after_final_norm, intra_ids,
                  baseline_ids)  # fmt: skip


def _tolerance(data: _Layer, first_rows: np.ndarray) -> float:
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


def _paper_measures(transforms, passed: LayerPass, sums: dict, words: dict, sentences: dict, tol: float,
                    settings: MeasureSettings, layer: int) -> list[_Variant]:  # fmt: skip
    """Every variant's measures from the layer pass, the variants' unit-row sums, their words and their
    sampled sentences' measures (``_sentence_measures``)."""
    masked = _mev_masked(settings, layer)
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
    rng = _rng(settings.seed, _BASELINE, layer)
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
    self_mean, intra_mean, mev_mean = _mean_or_nan(self_similarity), _mean_or_nan(variant.intra), _mean_or_nan(variant.mev)
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


def _geometry(data: _Layer, passed: LayerPass, units, settings: MeasureSettings, layer: int, *, rng, massive,
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


def _layer_row(data: _Layer, norms: np.ndarray, none: _Variant, primary, sampled, cis, panel: dict, masked: bool,
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
