"""The engine on both backends: the same measurement code on numpy and on torch (its CPU backend here; a
GPU runs the same code) gives the same tables, and every self-similarity is float64-exact.

The synthetic layers hold what broke earlier engines: rows of attention-sink size (norm ~23,000) beside
ordinary rows (norm ~150) in a layer wider than the stacking limit (d > ``word_stats.STACK_MAX``, so words
take the padded Gram route), zero rows, a word of zero rows, a word of duplicated rows (degenerate), words
above d (scatter route), empty sentences, float16 storage with massive activations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import measure_settings
from contextuality.measure.engine import word_stats
from contextuality.measure.layer_job import OccurrenceIndex, RowsInMemory, measure_rows
from contextuality.measure.reference import measures as reference

torch = pytest.importorskip("torch")


def sink_layer(d: int = 96, seed: int = 0, dtype=np.float16):
    """A synthetic layer (rows, offsets, occurrences): Zipf-sized words around their own directions, one word
    with a second sense, sink rows (norm ~23,000) at every sentence's first position, the cases above."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 25, size=260)
    lengths[[3, 40, 41]] = 0  # empty sentences
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = int(offsets[-1])
    sizes = [2, 3, 5, 8, 13, 30, 48, 49, 64, 65, 90, d, d + 1, 150, 400]  # stacked, every padding bin, scatter
    word = np.full(n, -1)
    order = rng.permutation(n)
    at = 0
    for w, size in enumerate(sizes):
        word[order[at : at + size]] = w
        at += size
    centres = rng.normal(size=(len(sizes) + 3, d)) * 10
    X = centres[np.maximum(word, 0)] + rng.normal(size=(n, d)) * 6  # rows of norm ~150 at d = 96
    X[word == 5] += np.where(rng.random(((word == 5).sum(), 1)) < 0.5, 15, -15)  # two senses
    first = offsets[:-1][lengths > 0]
    X[first] *= 0.01
    X[first, 7] = 23_000.0  # attention sinks: massive in one dimension
    X[first, 11] = -9_000.0
    X[order[at : at + 6]] = 0.0  # zero rows, and a word of them
    word[order[at : at + 3]] = len(sizes)
    word[order[at + 3 : at + 6]] = -1
    dup = order[at + 6 : at + 12]
    X[dup] = X[dup[0]]  # a word of one vector, six times (degenerate)
    word[dup] = len(sizes) + 1
    rows = np.flatnonzero(word >= 0)
    occurrences = pd.DataFrame({"word": np.char.add("w", word[rows].astype(str)), "row": rows})
    return X.astype(dtype), offsets, occurrences


def _measure(X, offsets, occurrences, *, backend: str, compute_dtype: str, **metrics):
    settings = measure_settings(seed=3, compute_dtype=compute_dtype, intra_sentences=60, baseline_samples=80,
                                geometry_sample=120, twonn_sample=60, bootstrap_resamples=50, **metrics)  # fmt: skip
    rows = X if backend == "numpy" else torch.from_numpy(X)
    held = RowsInMemory(rows, offsets, path="synthetic", stored_dtype=X.dtype, block_rows=256)
    return measure_rows(held, 2, OccurrenceIndex(occurrences), settings, model="m", units=None)


# the columns computed on host-drawn rows by the same numpy code: the same bytes on either backend
HOST_SAMPLED = ["baseline_cosine", "baseline_mev", "n_baseline_vectors", "norm_mean", "norm_std", "pc1_ratio",
                "effective_rank", "isoscore", "isoscore_star", "twonn_dimension", "twonn_duplicate_fraction",
                "geometry_sample", "n_sentences_sampled"]  # fmt: skip


@pytest.mark.parametrize("compute_dtype, atol, variant_atol", [("float64", 1e-10, 1e-10), ("float32", 1e-5, 1e-4)])
def test_torch_and_numpy_give_the_same_tables(compute_dtype, atol, variant_atol):
    """float64: equal within 1e-10. float32: the stored vectors' measures within 1e-5 per word; the
    post-processed variants within 1e-4 on this layer, whose float32 moments (the variants' maps) carry
    sink rows of norm 23,000: there each float32 backend is itself 4e-6 to 1.4e-5 from float64 (measured)."""
    X, offsets, occurrences = sink_layer()
    a, b = (
        _measure(X, offsets, occurrences, backend=backend, compute_dtype=compute_dtype,
                 postprocess=["none", "standardize", "abtt"])
        for backend in ("numpy", "torch")
    )  # fmt: skip
    for column, value in a.row.items():
        if isinstance(value, str) or column in HOST_SAMPLED:
            assert b.row[column] == value or (value != value and b.row[column] != b.row[column]), column
        else:
            np.testing.assert_allclose(b.row[column], value, atol=atol, rtol=0, err_msg=column)
    pd.testing.assert_frame_equal(a.words[["model", "word", "layer", "n"]], b.words[["model", "word", "layer", "n"]])
    for column in ("self_similarity", "mev", "mev_literal", "mev_centered", "primary"):
        np.testing.assert_allclose(b.words[column], a.words[column], atol=atol, rtol=0, err_msg=column)
    np.testing.assert_allclose(b.pcs, a.pcs, atol=10 * atol, rtol=0)
    for row_a, row_b in zip(a.postprocess, b.postprocess):
        for column, value in row_a.items():
            if isinstance(value, str):
                assert row_b[column] == value
            else:
                tolerance = atol if row_a["postprocess"] == "none" else variant_atol
                np.testing.assert_allclose(row_b[column], value, atol=tolerance, rtol=0,
                                           err_msg=f"{row_a['postprocess']} {column}")  # fmt: skip
    np.testing.assert_allclose(b.rogue, a.rogue, atol=atol, rtol=0)
    assert a.row["massive_dims"] == b.row["massive_dims"] == "7,11"
    assert a.row["n_degenerate_words"] == b.row["n_degenerate_words"] >= 1


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("d", [96, 600])
def test_self_similarity_is_float64_exact_beside_sink_rows(backend, d):
    """float32 products once mis-stated words mixing sink rows with ordinary ones by up to 7.5e-4 (a real
    SmolLM2 layer): every route now takes the float64 sum of unit rows, so each word equals a brute force
    over every ordered pair in float64, on a layer wider than the stacking limit."""
    assert d > word_stats.STACK_MAX
    X, offsets, occurrences = sink_layer(d=d, seed=1)
    result = _measure(X, offsets, occurrences, backend=backend, compute_dtype="float32", geometry=False,
                      postprocess=["none"])  # fmt: skip
    index = OccurrenceIndex(occurrences)
    ends = np.append(index.group_starts[1:], len(index.rows))
    brute = []
    for a, b in zip(index.group_starts, ends):
        U = reference.unit_rows(X[index.rows[a:b]].astype(np.float64))
        U = U[(U != 0).any(axis=1)]
        pairs = len(U) * (len(U) - 1)
        brute.append((np.sum(U @ U.T) - np.trace(U @ U.T)) / pairs if pairs else np.nan)
    got = result.words.set_index("word")["self_similarity"].loc[index.words].to_numpy()
    np.testing.assert_allclose(got, np.clip(brute, -1, 1), atol=1e-12, rtol=0)
    sinks = occurrences["row"].isin(offsets[:-1]).groupby(occurrences["word"]).any()
    assert sinks.sum() >= 5  # the words that mix sink rows with ordinary ones are among them


def test_chunks_and_one_chunk_give_the_same_sums():
    """A layer passed in several chunks of whole sentences (a device's batches, a file read in chunks) gives
    the sums of one chunk to float64 rounding, on the torch backend as on numpy."""
    from contextuality.measure.engine.layer_pass import LayerPassSums, layer_shift
    from contextuality.measure.engine.sentences import intra_sentence_by_length

    X, offsets, _ = sink_layer(d=64, seed=2, dtype=np.float32)
    T = torch.from_numpy(X)
    whole = LayerPassSums(int(np.count_nonzero(np.diff(offsets))), layer_shift(X), np.float64)
    whole.add(T, offsets)
    parts = LayerPassSums(int(np.count_nonzero(np.diff(offsets))), layer_shift(X), np.float64)
    cuts = [0, 70, 71, 200, len(offsets) - 1]
    values = []
    for s0, s1 in zip(cuts, cuts[1:]):
        a, b = int(offsets[s0]), int(offsets[s1])
        parts.add(T[a:b], offsets[s0 : s1 + 1] - a, a)
        values.append(intra_sentence_by_length(T[a:b], offsets[s0 : s1 + 1] - a))
    one, many = whole.result(), parts.result()
    np.testing.assert_allclose(many.uniform_second, one.uniform_second, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(many.weighted_first, one.weighted_first, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(many.cosines.sum_weighted, one.cosines.sum_weighted, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.concatenate(values), intra_sentence_by_length(X, offsets), rtol=0, atol=1e-14)
    np.testing.assert_allclose(intra_sentence_by_length(X, offsets),
                               reference.intra_sentence_similarity(X, offsets, np.arange(len(offsets) - 1)),
                               rtol=0, atol=1e-14)  # fmt: skip


def test_a_one_sentence_layer_gives_the_same_tables_on_both_backends():
    """A layer of one sentence (every pair inside it): the exact baselines are those of its rows, and torch
    and numpy agree."""
    rng = np.random.default_rng(4)
    X = (rng.normal(size=(40, 64)) * 3 + 1).astype(np.float32)
    offsets = np.array([0, 40])
    occurrences = pd.DataFrame({"word": ["a"] * 6 + ["b"] * 30, "row": np.r_[0:6, 10:40]})
    a = _measure(X, offsets, occurrences, backend="numpy", compute_dtype="float64")
    b = _measure(X, offsets, occurrences, backend="torch", compute_dtype="float64")
    for column, value in a.row.items():
        if isinstance(value, str):
            assert b.row[column] == value
        else:
            np.testing.assert_allclose(b.row[column], value, atol=1e-10, rtol=0, err_msg=column)
    U = reference.unit_rows(X.astype(np.float64))
    cosines = U @ U.T
    assert a.row["baseline_cosine_uniform"] == pytest.approx((cosines.sum() - 40) / (40 * 39), abs=1e-12)
    np.testing.assert_allclose(b.words["self_similarity"], a.words["self_similarity"], atol=1e-12, rtol=0)
