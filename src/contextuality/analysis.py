"""The measurement step: one layer file in, that layer's measures out; then one model's tables.

``measure_layer`` reads one layer file once, whole, into memory (in its stored dtype), and takes every
measure of that layer from the in-memory array, in float64 chunks; peak memory is about one layer plus
one chunk. It is one workflow job per (model, layer), so layers are measured in parallel.
``combine_layers`` then joins the per-layer results into the model's tables. Random draws come from
streams derived from one seed, one per purpose (and per layer where the paper redraws), never from the
order the layers are measured in, so a rerun with the same seed writes byte-identical files. Outputs
follow docs/data-contract.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality import measures
from contextuality.atomic import atomic_path
from contextuality.store import StoreError, check_layer, check_layer_set, read_layer

__all__ = ["combine_layers", "measure_layer", "measure_model", "read_layer", "write_layer_results", "write_vectors_text"]

LOG = logging.getLogger(__name__)

SELF_SIMILARITY_MODES = ("exact", "sampled", "both")
# Sub-seeds of the random streams; each purpose draws from its own stream.
_SENTENCE_SAMPLE, _BASELINE, _SAMPLED_PAIRS, _BOOTSTRAP = range(4)
WORD_COLUMNS = ["model", "word", "layer", "n", "self_similarity", "self_similarity_sampled", "mev", "mev_literal", "mev_centered"]
LAYER_COLUMNS = [
    "model", "layer", "n_words", "n_sentences_sampled",
    "self_similarity", "self_similarity_ci_low", "self_similarity_ci_high",
    "intra_sentence", "intra_sentence_ci_low", "intra_sentence_ci_high",
    "mev", "mev_ci_low", "mev_ci_high", "mev_literal", "mev_centered",
    "baseline_cosine", "baseline_mev",
    "adjusted_self_similarity", "adjusted_intra_sentence", "adjusted_mev",
    "norm_mean", "norm_std",
    "self_similarity_sampled", "n_baseline_vectors",
]  # fmt: skip
CONTEXT_WORD_COLUMNS = ["rank", "kind", "word", "mean_self_similarity", "n"]


def _rng(seed: int, purpose: int, layer: int = 0) -> np.random.Generator:
    """The random stream for one purpose (and layer), independent of the order work is done in."""
    return np.random.default_rng([seed, purpose, layer])


def write_vectors_text(path: Path, words: np.ndarray, vectors: np.ndarray) -> None:
    """Write ``word v1 ... vd`` lines (word2vec/GloVe text format, no header), 6 significant digits."""
    line_format = "%s" + " %.6g" * vectors.shape[1] + "\n"
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.writelines(line_format % (word, *vector) for word, vector in zip(words, vectors.tolist()))


def _word_chunks(group_starts: np.ndarray, rows_per_chunk: int) -> Iterator[tuple[int, int]]:
    """Consecutive word ranges [a, b) whose occurrences span about ``rows_per_chunk`` rows."""
    chunk_of_word = group_starts // rows_per_chunk
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(chunk_of_word)) + 1, [len(group_starts)]])
    return zip(bounds[:-1].tolist(), bounds[1:].tolist())


def _mean_or_nan(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else float("nan")


def _measure_words(vectors, rows, group_starts, *, seed, self_similarity, sampled_pairs, with_pcs):
    """Self-similarity and PC statistics of every word at one layer; arrays aligned with ``group_starts``."""
    n_words, dim = len(group_starts), vectors.shape[1]
    exact, sampled = np.full(n_words, np.nan), np.full(n_words, np.nan)
    pcs = measures.PCStats(*(np.full(n_words, np.nan) for _ in range(3)), np.full((n_words, dim), np.nan))
    # Same stream at every layer: a word gets the same sampled pairs in each layer, as in the paper's code.
    pair_rng = _rng(seed, _SAMPLED_PAIRS)
    ends = np.append(group_starts[1:], len(rows))
    for first, last in _word_chunks(group_starts, max(1, measures.BATCH_ELEMENTS // dim)):
        row_start, row_end = group_starts[first], ends[last - 1]
        X = vectors[rows[row_start:row_end]].astype(np.float64)
        local_starts = group_starts[first:last] - row_start
        if self_similarity in ("exact", "both"):
            exact[first:last] = measures.self_similarity_exact(X, local_starts)
        if self_similarity in ("sampled", "both"):
            local_ends = np.append(local_starts[1:], len(X))
            sampled[first:last] = [
                measures.self_similarity_sampled(X[a:b], pair_rng, sampled_pairs) for a, b in zip(local_starts, local_ends)
            ]
        if with_pcs:
            for column, values in zip(pcs, measures.pc_stats_by_word(X, local_starts)):
                column[first:last] = values
    return exact, sampled, pcs


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
        self.counts = measures.group_sizes(self.group_starts, len(self.rows))


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
    log: logging.Logger = LOG,
) -> tuple[dict, pd.DataFrame, np.ndarray]:
    """Every measure of one layer: its ``layers`` record, its rows of the ``words`` table, its PC vectors.

    ``intra_sentences`` sentences (or ``"all"``) are averaged for intra-sentence similarity and
    ``baseline_samples`` sentences feed the baselines (and ``baseline_samples`` pairs the cosine
    baseline); both sets are prefixes of one seeded permutation of the sentences, the same for every
    layer (spec 4.4). ``self_similarity`` chooses the exact all-pairs mean, the paper's sampled estimate
    (at most ``sampled_pairs`` ordered pairs), or both; the per-layer mean uses the exact values
    whenever they are computed. MEV is computed for layers >= 1 (and layer 0 too if ``mev_layer0``);
    the PC vectors for every layer (layer 0: Table 1's static baseline). With a ``manifest`` (the
    model's ``manifest.json``), the layer file is first checked against it (index, rows, dims).
    """
    if self_similarity not in SELF_SIMILARITY_MODES:
        raise ValueError(f"self_similarity must be one of {SELF_SIMILARITY_MODES}, got {self_similarity!r}")
    if not (intra_sentences == "all" or (isinstance(intra_sentences, int) and intra_sentences > 0)):
        raise ValueError(f"intra_sentences must be a positive integer or 'all', got {intra_sentences!r}")
    index = occurrences if isinstance(occurrences, OccurrenceIndex) else OccurrenceIndex(occurrences)
    if manifest is not None:
        check_layer(layer_path, manifest, layer)
    started = time.perf_counter()
    vectors, offsets = read_layer(layer_path)
    if len(index.rows) and index.rows.max() >= len(vectors):
        raise StoreError(f"{layer_path}: occurrences refer to row {index.rows.max()} but the file has {len(vectors)} rows")
    n_sentences = len(offsets) - 1
    if manifest is not None and n_sentences != manifest["n_sentences"]:
        raise StoreError(f"{layer_path}: {n_sentences} sentences, but the manifest lists {manifest['n_sentences']}")
    sentence_sample = _rng(seed, _SENTENCE_SAMPLE).permutation(n_sentences)
    intra_ids = sentence_sample if intra_sentences == "all" else sentence_sample[:intra_sentences]
    baseline_ids = sentence_sample[:baseline_samples]

    # The linear algebra is thousands of small problems, where BLAS threads cost more than they gain:
    # on 2 cores shared with another job, a layer took 2.5 s with one BLAS thread and 15 s with two.
    with threadpool_limits(limits=1, user_api="blas"):
        exact, sampled, pcs = _measure_words(
            vectors, index.rows, index.group_starts, seed=seed, self_similarity=self_similarity,
            sampled_pairs=sampled_pairs, with_pcs=True,
        )  # fmt: skip
        if layer == 0 and not mev_layer0:
            # the paper reports no MEV at the input layer; its PC vectors are still Table 1's layer-0 baseline
            pcs = measures.PCStats(*(np.full_like(column, np.nan) for column in pcs[:3]), pcs.first_vector)
        primary = sampled if self_similarity == "sampled" else exact
        intra = measures.intra_sentence_similarity(vectors, offsets, intra_ids)
        baseline = measures.anisotropy_baseline(vectors, offsets, baseline_ids, _rng(seed, _BASELINE, layer), baseline_samples)
        norms = measures.row_norms(vectors[measures.sentence_rows(offsets, baseline_ids)[0]])

        bootstrap_rng = _rng(seed, _BOOTSTRAP, layer)
        self_ci, intra_ci, mev_ci = (
            measures.bootstrap_ci(values, bootstrap_rng, bootstrap_resamples) for values in (primary, intra, pcs.mev)
        )
    self_mean, intra_mean, mev_mean = _mean_or_nan(primary), _mean_or_nan(intra), _mean_or_nan(pcs.mev)
    record = {
        "model": model, "layer": layer, "n_words": len(index.group_starts), "n_sentences_sampled": int((~np.isnan(intra)).sum()),
        "self_similarity": self_mean, "self_similarity_ci_low": self_ci[0], "self_similarity_ci_high": self_ci[1],
        "intra_sentence": intra_mean, "intra_sentence_ci_low": intra_ci[0], "intra_sentence_ci_high": intra_ci[1],
        "mev": mev_mean, "mev_ci_low": mev_ci[0], "mev_ci_high": mev_ci[1],
        "mev_literal": _mean_or_nan(pcs.mev_literal), "mev_centered": _mean_or_nan(pcs.mev_centered),
        "baseline_cosine": baseline.cosine, "baseline_mev": baseline.mev,
        "adjusted_self_similarity": self_mean - baseline.cosine,
        "adjusted_intra_sentence": intra_mean - baseline.cosine,
        "adjusted_mev": mev_mean - baseline.mev,
        "norm_mean": _mean_or_nan(norms), "norm_std": float(norms.std()) if len(norms) else float("nan"),
        "self_similarity_sampled": _mean_or_nan(sampled), "n_baseline_vectors": baseline.n_vectors,
    }  # fmt: skip
    words = pd.DataFrame({
        "model": model, "word": index.words, "layer": layer, "n": index.counts,
        "self_similarity": exact, "self_similarity_sampled": sampled,
        "mev": pcs.mev, "mev_literal": pcs.mev_literal, "mev_centered": pcs.mev_centered, "primary": primary,
    })  # fmt: skip
    log.info(
        "%s layer %d: self-sim %.3f, intra %.3f, MEV %.3f, baseline cos %.3f MEV %.3f (%.1f s)",
        model, layer, record["self_similarity"], record["intra_sentence"], record["mev"],
        record["baseline_cosine"], record["baseline_mev"], time.perf_counter() - started,
    )  # fmt: skip
    # what the layer was measured on, for the combining step's check against the manifest
    record["_shape"] = {"rows": int(vectors.shape[0]), "dim": int(vectors.shape[1])}
    return record, words, pcs.first_vector


def write_layer_results(
    record: dict, words: pd.DataFrame, first_vectors: np.ndarray, out_record: Path, out_words: Path, out_pcs: Path
) -> None:
    """One layer's results: its record (JSON, floats exact), its words table (parquet), its PC vectors (text)."""
    with atomic_path(out_record) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n")
    with atomic_path(out_words) as tmp:
        words.to_parquet(tmp, index=False)
    write_vectors_text(Path(out_pcs), words["word"].to_numpy(), first_vectors)


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
) -> None:
    """A model's tables from its per-layer results, after checking they cover exactly the manifest's layers."""
    if manifest is not None:
        check_layer_set(manifest, {record["layer"]: record["_shape"] for record in records}, manifest_path)
    order = np.argsort([record["layer"] for record in records], kind="stable")
    records = [{k: v for k, v in records[i].items() if not k.startswith("_")} for i in order]
    word_table = pd.concat([word_tables[i] for i in order], ignore_index=True).astype({"layer": "int64", "n": "int64"})
    layer_table = pd.DataFrame(records, columns=LAYER_COLUMNS).astype({"layer": "int64", "n_words": "int64"})
    with atomic_path(out_words) as tmp:
        word_table[WORD_COLUMNS].to_parquet(tmp, index=False)
    with atomic_path(out_layers) as tmp:
        layer_table.to_parquet(tmp, index=False)
    with atomic_path(out_context_words) as tmp:
        _context_specific_words(word_table, top_k).to_csv(tmp, index=False)


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
        record, words, first_vectors = measure_layer(
            Path(layer_paths[layer]), layer, index, model=model, seed=seed, log=log, **options
        )
        records.append(record)
        tables.append(words)
        write_vectors_text(out_pcs_dir / f"layer_{layer:02d}.txt", index.words, first_vectors)
    combine_layers(records, tables, out_words, out_layers, out_context_words, top_k=top_k)
