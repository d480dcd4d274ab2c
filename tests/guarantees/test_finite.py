"""Guarantee: measured vectors are finite, and zero vectors are counted, never dropped silently.

* a NaN or an infinity in a stored layer stops its measurement before any eigen-solve, with one line naming
  the layer file, the layer, the first such row, its sentence and word (with or without the geometry panel);
* a row whose squared norm overflows the compute dtype is named the same way, with the way out (float64);
* a zero vector has no direction: every cosine measure leaves it out (as the reference definitions do), the
  layer counts them (``n_zero_vectors``), and ``n_words`` counts exactly the words its self-similarity mean
  averages (two or more non-zero vectors); the MEV keeps a zero vector as a point.

Extraction's side (a NaN from the model, float16 overflow at the storage cast) is in tests/test_extract.py;
here, both ends in the workflow: the extraction and measurement jobs end with their one line, no traceback.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import measure_settings, run_snakemake
from contextuality.measure.layer_job import measure_layer
from contextuality.measure.reference import exact_baseline, word_pcs
from contextuality.measure.reference import measures as reference
from contextuality.store.files import StoreError
from workflow_runs import failure, hook_env, smoke_config_path

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]
DIM = 12
FIRST_SENTENCE_ID = 100  # the file's sentence ids differ from positions: the message names the id


def write_layer(path, vectors, offsets, dtype=np.float16):
    with h5py.File(path, "w") as f, np.errstate(over="ignore"):  # float16 overflow stores infinity, as asked
        f.create_dataset("vectors", data=vectors.astype(dtype))
        f.create_dataset("sentence_offsets", data=offsets)
        f.create_dataset("sentence_ids", data=FIRST_SENTENCE_ID + np.arange(len(offsets) - 1))
        f.attrs.update({"model": "fake", "layer": 3, "dtype": np.dtype(dtype).name, "complete": 1})
    return path


@pytest.fixture
def layer(tmp_path):
    """Vectors around each word's direction, in 30 sentences; the last label marks rows no word indexes."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(3, 8, size=30)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n_rows = int(offsets[-1])
    word_of_row = rng.choice(len(WORDS) + 1, size=n_rows)
    directions = rng.normal(size=(len(WORDS) + 1, DIM)) + 1.0
    vectors = directions[word_of_row] + 0.7 * rng.normal(size=(n_rows, DIM))
    indexed = np.flatnonzero(word_of_row < len(WORDS))
    occurrences = pd.DataFrame({"word": np.array(WORDS)[word_of_row[indexed]], "row": indexed.astype(np.int64)})
    return tmp_path, vectors, offsets, occurrences


def settings(**metrics):
    return measure_settings(seed=1, **{"intra_sentences": 10, "baseline_samples": 20, "bootstrap_resamples": 50,
                                       "geometry_sample": 100, "twonn_sample": 50, **metrics})  # fmt: skip


def sentence_of(offsets, row):
    return int(np.searchsorted(offsets, row, side="right") - 1)


@pytest.mark.parametrize("metrics, indexed", [({"geometry": False, "postprocess": ["none"]}, False), ({}, True)],
                         ids=["bare-unindexed", "default-indexed"])  # fmt: skip
def test_a_nan_in_a_stored_vector_stops_the_measurement_naming_file_layer_row_sentence_and_word(
    layer, metrics, indexed
):
    """Case 7: with the geometry panel and the post-processed variants off, a NaN in a row no word indexes gave
    NaN exact baselines and exit code 0; in a word's row, or with them on, an eigen-solve crashed naming nothing
    (case 13). Now: one line, naming the first non-finite row of the layer (and its word, if it has one)."""
    folder, vectors, offsets, occurrences = layer
    unindexed = np.setdiff1d(np.arange(len(vectors)), occurrences["row"])
    if indexed:
        row, word = int(occurrences.loc[occurrences["word"] == "gamma", "row"].iloc[1]), ", word 'gamma'"
    else:
        row, word = int(unindexed[3]), ""
    vectors[row, 4] = np.nan
    vectors[unindexed[unindexed > row][1], 0] = np.nan  # a later one, in no word: counted, not named
    path = write_layer(folder / "layer_03.h5", vectors, offsets)
    with pytest.raises(StoreError) as refused:
        measure_layer(path, 3, occurrences, settings(**metrics), model="fake")
    assert str(refused.value) == (
        f"{path}: layer 3, row {row} (sentence {FIRST_SENTENCE_ID + sentence_of(offsets, row)}{word}) holds nan (2 "
        f"of the layer's {len(vectors)} rows hold NaN or infinity); the measures need finite vectors: delete the "
        "model's shards and rerun snakemake to re-extract them (extraction refuses non-finite values, naming the "
        "sentence and layer where the model produced them)"
    )


def test_an_infinity_stops_the_measurement_before_any_eigen_solve(layer, monkeypatch):
    """Case 13: float16 infinity in a row no word indexes; measurement used to end in LinAlgError. The refusal
    comes from the first pass over the rows: no eigen-solve runs."""
    from contextuality.measure.engine import word_stats

    folder, vectors, offsets, occurrences = layer
    row = int(np.setdiff1d(np.arange(len(vectors)), occurrences["row"])[0])
    vectors[row, 2] = -1e6  # beyond float16's range: stored as -inf
    path = write_layer(folder / "layer_03.h5", vectors, offsets)

    def no_eigen_solve(*args, **kwargs):
        raise AssertionError("an eigen-solve ran on a layer holding an infinity")

    monkeypatch.setattr(np.linalg, "eigh", no_eigen_solve)
    monkeypatch.setattr(word_stats, "top_eigenpairs", no_eigen_solve)
    with pytest.raises(StoreError, match=(
        rf"layer_03\.h5: layer 3, row {row} \(sentence {FIRST_SENTENCE_ID + sentence_of(offsets, row)}\) holds -inf "
        r"\(1 of the layer's \d+ rows hold NaN or infinity\)"
    )):  # fmt: skip
        measure_layer(path, 3, occurrences, settings(), model="fake")


def test_squares_overflowing_float32_name_the_row_and_float64(layer):
    """Finite float32 values whose squares overflow float32: named, with the compute dtype that measures them."""
    folder, vectors, offsets, occurrences = layer
    row = int(occurrences["row"].iloc[0])
    vectors[row] *= 1e20
    path = write_layer(folder / "layer_03.h5", vectors, offsets, dtype=np.float32)
    with pytest.raises(StoreError, match=(
        rf"layer 3, row {row} \(sentence {FIRST_SENTENCE_ID + sentence_of(offsets, row)}, word '{occurrences['word'].iloc[0]}'\) "
        r"has values up to [0-9.]+e\+20, whose squares overflow float32: measure in float64 \(metrics.compute_dtype: "
        r"float64\)"
    )):  # fmt: skip
        measure_layer(path, 3, occurrences, settings(geometry=False), model="fake")
    result = measure_layer(path, 3, occurrences, settings(geometry=False, compute_dtype="float64"), model="fake")
    assert np.isfinite(result.row["baseline_cosine_exact"])


def test_zero_vectors_are_counted_and_left_out_of_every_cosine_as_the_reference_does(layer):
    """Zero rows: every occurrence of 'alpha', all but one of 'beta', some of 'gamma', and rows no word indexes.
    Per word and per layer the engine equals the reference definitions (brute force); ``n_words`` counts the
    words in the self-similarity mean (alpha and beta have fewer than two non-zero vectors: NaN, not in it)."""
    folder, vectors, offsets, occurrences = layer
    rows_of = {word: occurrences.loc[occurrences["word"] == word, "row"].to_numpy() for word in WORDS}
    zero = np.concatenate([rows_of["alpha"], rows_of["beta"][1:], rows_of["gamma"][::2],
                           np.setdiff1d(np.arange(len(vectors)), occurrences["row"])[:5]])  # fmt: skip
    vectors[zero] = 0.0
    path = write_layer(folder / "layer_03.h5", vectors, offsets)
    result = measure_layer(path, 3, occurrences, settings(geometry=False, compute_dtype="float64"), model="fake")

    stored = vectors.astype(np.float16).astype(np.float64)
    ordered = occurrences.sort_values(["word", "row"], kind="stable")
    X = stored[ordered["row"].to_numpy()]
    starts = np.flatnonzero(np.r_[True, ordered["word"].to_numpy()[1:] != ordered["word"].to_numpy()[:-1]])
    expected_self = reference.self_similarity_exact(X, starts)
    assert np.isnan(expected_self[[0, 1]]).all() and np.isfinite(expected_self[2:]).all()  # alpha, beta: NaN
    words = result.words.set_index("word").loc[sorted(WORDS)]
    np.testing.assert_allclose(words["self_similarity"], expected_self, rtol=0, atol=1e-9)
    np.testing.assert_allclose(words["mev"], word_pcs.pc_stats_by_word(X, starts).mev, rtol=0, atol=1e-9)

    row = result.row
    assert row["n_words"] == int(np.isfinite(expected_self).sum()) == len(WORDS) - 2
    assert row["n_zero_vectors"] == len(zero) == int((np.abs(stored).sum(axis=1) == 0).sum())
    assert row["self_similarity"] == pytest.approx(np.nanmean(expected_self), abs=1e-12)
    exact = exact_baseline.exact_baseline(stored, offsets)
    assert row["baseline_cosine_exact"] == pytest.approx(exact.cosine, abs=1e-9)
    assert row["baseline_cosine_uniform"] == pytest.approx(exact.cosine_uniform, abs=1e-9)
    assert row["n_degenerate_words"] == 1  # alpha: all its vectors are zero, so it has no MEV either


def test_a_layer_without_zero_vectors_counts_every_word(layer):
    folder, vectors, offsets, occurrences = layer
    path = write_layer(folder / "layer_03.h5", vectors, offsets)
    row = measure_layer(path, 3, occurrences, settings(geometry=False), model="fake").row
    assert row["n_zero_vectors"] == 0 and row["n_words"] == len(WORDS)


# --------------------------------------------------------------------------------------------------
# The workflow's jobs (a copy of the shared smoke run)

MODEL = "tiny-gpt2"  # float16 storage, 4 shards
EMBEDDINGS = Path("results") / "embeddings" / "sts" / MODEL


@pytest.fixture
def scratch(smoke_run, tmp_path) -> Path:
    """A copy of the finished smoke run (times kept) that a test may damage."""
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    return workdir


def _ended_with_one_line(result, line: str, log: Path) -> None:
    """The run failed, and its job's ``line`` (a regex) stands in the terminal's output and in the job's ``log``,
    with no traceback."""
    assert result.returncode != 0, failure(result)
    assert re.search(line, result.stderr), failure(result)
    text = log.read_text()
    assert re.search(line, text) and "Traceback" not in text, text


@pytest.mark.slow
def test_a_nan_in_a_shard_ends_the_measure_layer_job_with_one_line(scratch):
    shard = scratch / EMBEDDINGS / "shards" / "shard_1.h5"
    with h5py.File(shard, "a") as handle:
        handle["layer_02"][5, 3] = np.nan
        row = int(handle.attrs["first_row"]) + 5
    target = f"results/metrics/sts/{MODEL}/per_layer/layer_02.json"
    result = run_snakemake(
        scratch, target, "--cores", "1", "--forcerun", "measure_layer", configfile=smoke_config_path()
    )
    line = (
        rf"{EMBEDDINGS}/layers/layer_02\.h5: layer 2, row {row} \(sentence \d+(, word '[^']+')?\) holds nan \(1 of "
        r"the layer's \d+ rows hold NaN or infinity\); the measures need finite vectors: delete the model's shards"
    )
    _ended_with_one_line(result, line, scratch / "logs" / "measure_layer" / "sts" / MODEL / "layer_02.log")


@pytest.mark.slow
def test_a_nan_from_the_model_ends_the_extraction_job_with_one_line_and_keeps_no_shard(scratch):
    """The model's hidden states scaled by NaN (a test hook) in one shard job: the job ends with the one line, the
    shard is not kept. (The smoke run stores float32; float16 overflow is tested on extract_shard directly.)"""
    target = EMBEDDINGS / "shards" / "shard_0.h5"
    result = run_snakemake(scratch, str(target), "--cores", "1", "--forcerun", "extract", configfile=smoke_config_path(),
                           env=hook_env(GUARANTEES_SCALE_ACTIVATIONS="nan"))  # fmt: skip
    line = (
        rf"{target}: model '{MODEL}', shard 0, layer 0, sentence \d+ \(unit '[^']+', row 0 of the shard\): the "
        r"vector holds nan from the model's forward pass; nothing was stored"
    )
    _ended_with_one_line(result, line, scratch / "logs" / "extract" / "sts" / MODEL / "shard_0.log")
    assert not (scratch / target).exists() and not list((scratch / target).parent.glob(".shard_0.tmp-*"))
