"""Bounded memory: a layer larger than ``metrics.memory_mb`` is measured in chunks (``measure.engine.streaming``),
with the in-memory path's results, and its peak memory stays within the budget."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT, measure_settings
from contextuality.measure import layer_job
from contextuality.measure.engine.streaming import (
    BASE_MB,
    MemoryPlan,
    OccurrenceSpill,
    plan_memory,
    read_chunks,
    sentence_chunks,
    word_groups,
)  # fmt: skip
from contextuality.measure.layer_job import OccurrenceIndex
from contextuality.store.reader import LayerReader


def write_layer(folder, *, n_sentences, dim, n_words=300, seed=0, massive=False):
    """A float16 layer file (the store's plain form) and its occurrences: Zipf words around their own
    directions, a shared offset, a rogue dimension; with ``massive``, a few massive activations."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, size=n_sentences)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_rows = int(offsets[-1])
    weights = 1.0 / np.arange(1, n_words + 1)
    word = rng.choice(n_words, size=n_rows, p=weights / weights.sum())
    word[rng.random(n_rows) < 0.2] = -1
    directions = rng.standard_normal((n_words + 1, dim)).astype(np.float32)
    path = folder / "layer_1.h5"
    with h5py.File(path, "w") as f:
        vectors = f.create_dataset("vectors", shape=(n_rows, dim), dtype=np.float16)
        for a in range(0, n_rows, 100_000):
            b = min(a + 100_000, n_rows)
            block = directions[word[a:b]] + 0.8 * rng.standard_normal((b - a, dim), dtype=np.float32) + 0.5
            block[:, 3] += 6.0  # a rogue dimension
            if massive:
                block[rng.random(b - a) < 0.002, 7] = 3000.0  # over 100 and 1,000 x the median |x|
            vectors[a:b] = block.astype(np.float16)
        f.create_dataset("sentence_offsets", data=offsets)
        f.attrs.update({"model": "synthetic", "layer": 1, "n_layers": 2, "dim": dim, "complete": 1})
    rows = np.flatnonzero(word >= 0)
    counts = np.bincount(word[rows], minlength=n_words)
    rows = rows[counts[word[rows]] >= 5]
    occurrences = pd.DataFrame({"word": np.char.add("w", word[rows].astype(str)), "row": rows})
    return path, occurrences


def _measure(path, occurrences, settings, monkeypatch, plan=None):
    if plan is not None:
        monkeypatch.setattr(layer_job, "plan_memory", lambda *args: plan)
    result = layer_job.measure_layer(path, 1, occurrences, settings, model="m")
    monkeypatch.undo()
    return result


def _assert_close(whole: dict, streamed: dict, rtol: float):
    assert whole.keys() == streamed.keys()
    for key, value in whole.items():
        if isinstance(value, str):
            assert streamed[key] == value, key
        else:
            np.testing.assert_allclose(streamed[key], value, rtol=rtol, atol=0, equal_nan=True, err_msg=key)


@pytest.mark.parametrize("compute_dtype, rtol", [("float64", 1e-9), ("float32", 1e-6)])
@pytest.mark.parametrize("intra", [500, "all"])
def test_chunks_give_the_in_memory_results(tmp_path, monkeypatch, compute_dtype, rtol, intra):
    """Chunks of a few hundred rows, word groups of a few hundred occurrences (many spill reads, words split
    over chunks): every number of the layer row, the post-processing rows, the words and their PC vectors
    as in memory; float64 within 1e-9 (sums over rows in float64), float32 within its own rounding (its
    products over blocks of rows are float32, and the blocks hold other sentences)."""
    path, occurrences = write_layer(tmp_path, n_sentences=1_500, dim=24, massive=True)
    settings = measure_settings(self_similarity="both", intra_sentences=intra, baseline_samples=300,
                                compute_dtype=compute_dtype, geometry_sample=400, twonn_sample=200,
                                bootstrap_resamples=50)  # fmt: skip
    whole = _measure(path, occurrences, settings, monkeypatch)
    streamed = _measure(path, occurrences, settings, monkeypatch, MemoryPlan(False, 700, 450))
    assert whole.row["massive_occurrences"] > 0 and whole.row["n_sentences_sampled"] > 0
    _assert_close(whole.row, streamed.row, rtol)
    for a, b in zip(whole.postprocess, streamed.postprocess, strict=True):
        _assert_close(a, b, rtol)
    pd.testing.assert_frame_equal(streamed.words, whole.words, rtol=rtol, atol=0)
    np.testing.assert_allclose(streamed.pcs, whole.pcs, rtol=0, atol=1e-6 if compute_dtype == "float32" else 1e-12)
    np.testing.assert_allclose(streamed.rogue, whole.rogue, rtol=rtol, atol=1e-12)


def test_chunks_are_whole_sentences_and_groups_whole_words():
    offsets = np.array([0, 3, 3, 10, 11, 40, 42])
    chunks = sentence_chunks(offsets, 8)
    assert chunks == [(0, 2), (2, 4), (4, 5), (5, 6)]  # the 29-row sentence alone, over the chunk size
    assert [a for a, _ in chunks[1:]] == [b for _, b in chunks[:-1]] and chunks[-1][1] == len(offsets) - 1
    starts = np.array([0, 2, 9, 10, 30])
    assert word_groups(starts, 33, 10) == [(0, 3), (3, 4), (4, 5)]


def test_the_spill_holds_each_word_occurrences_together(tmp_path):
    path, occurrences = write_layer(tmp_path, n_sentences=400, dim=8)
    index = OccurrenceIndex(occurrences)
    with LayerReader(path) as reader, OccurrenceSpill(index.rows, reader.shape[0], 8, reader.dtype, tmp_path) as spill:
        X = reader.rows()
        for chunk in read_chunks(reader, reader.offsets, sentence_chunks(reader.offsets, 500), np.float32):
            spill.add(chunk)
        np.testing.assert_array_equal(spill.read(0, len(index.rows), np.float16), X[index.rows])
        np.testing.assert_array_equal(spill.read(17, 40, np.float32), X[index.rows[17:40]].astype(np.float32))
    assert not list(tmp_path.glob(".occurrences-*"))  # removed when closed


def test_the_plan_reads_a_layer_whole_only_when_it_fits():
    assert plan_memory(300_000, 384, 4, 2048).whole  # the default run's MiniLM layer
    plan = plan_memory(3_000_000, 768, 4, 2048)
    assert not plan.whole and 0 < plan.chunk_rows * 768 * 4 * 3 < (2048 - BASE_MB) * 2**20
    with pytest.raises(ValueError, match=r"metrics.memory_mb: 600 MB cannot hold a 4096-dimensional layer"):
        plan_memory(1_000, 4096, 4, 600)


def test_peak_memory_stays_within_a_small_budget(tmp_path):
    """A layer of 307 MB in float16 (614 MB in float32, more than the whole budget) measured with
    metrics.memory_mb 700 in a fresh process: its peak RSS stays under 700 MB."""
    path, occurrences = write_layer(tmp_path, n_sentences=40_000, dim=256, n_words=3_000)
    occurrences.to_parquet(tmp_path / "occurrences.parquet")
    n_rows = int(h5py.File(path, "r")["vectors"].shape[0])
    assert n_rows * 256 * 4 > 700 * 2**20 * 0.8
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(PROJECT / "tests")!r})
        from conftest import measure_settings
        from contextuality.measure.layer_job import OccurrenceIndex, measure_layer
        settings = measure_settings(memory_mb=700, geometry=False, postprocess=["none"], bootstrap_resamples=0)
        index = OccurrenceIndex.from_parquet({str(tmp_path / "occurrences.parquet")!r})
        result = measure_layer({str(path)!r}, 1, index, settings,
                               model="m", scratch={str(tmp_path)!r})
        # VmHWM, not ru_maxrss: Linux carries the forking parent's peak into a child's ru_maxrss across exec
        peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
        print(json.dumps({{"peak_mb": peak_kb / 1024, "self_similarity": result.row["self_similarity"]}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0 < measured["self_similarity"] < 1
    assert measured["peak_mb"] < 700, measured


def test_the_index_from_parquet_is_the_index_of_the_table(tmp_path):
    """Words as a dictionary (each text once): the same rows, groups and words as from the DataFrame."""
    occurrences = pd.DataFrame({"word": ["b", "a", "é", "b", "a", "B", "a"], "row": [5, 9, 2, 1, 0, 7, 4],
                                "sentence_id": 0})  # fmt: skip
    occurrences.to_parquet(tmp_path / "occurrences.parquet")
    want, got = OccurrenceIndex(occurrences), OccurrenceIndex.from_parquet(tmp_path / "occurrences.parquet")
    for field in ("rows", "group_starts", "words", "counts"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    assert list(got.words) == ["B", "a", "b", "é"]


def test_a_killed_measurements_spill_is_swept_when_a_layer_job_starts_and_a_live_one_is_kept(tmp_path):
    """A streamed measurement killed mid-layer left its .occurrences-*.spill (hundreds of MB per layer) for ever,
    filling the disk. The layer job sweeps, at its start, every spill of its folder that no live job holds."""
    from contextuality.measure.engine import streaming

    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from contextuality.measure.engine.streaming import OccurrenceSpill
        spill = OccurrenceSpill(np.arange(1000), 1000, 64, np.float16, {str(tmp_path)!r})
        os.kill(os.getpid(), signal.SIGKILL)  # the job killed mid-layer: no cleanup runs
    """)], capture_output=True)  # fmt: skip
    assert killed.returncode == -9
    left = sorted(tmp_path.glob(".occurrences-*.spill"))
    assert len(left) == 1 and left[0].stat().st_size == 1000 * 64 * 2  # what the kill leaves
    (tmp_path / "layer_01.json").write_text("{}")  # not a spill: never touched
    with streaming.OccurrenceSpill(np.arange(10), 10, 4, np.float32, tmp_path) as live:  # a layer job measuring now
        assert streaming.sweep_stale_spills(tmp_path) == left
        assert sorted(tmp_path.glob(".occurrences-*.spill")) == [Path(live.file.name)]
        assert (tmp_path / "layer_01.json").exists()
    assert sorted(tmp_path.glob(".occurrences-*.spill")) == []  # and a finished one removes its own
    assert "sweep_stale_spills(scratch)" in (PROJECT / "workflow/scripts/measure_layer.py").read_text()
