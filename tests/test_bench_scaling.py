"""benchmarks/bench_scaling.py and its cost model (benchmarks/cost_model.py): the quick run's table, the
exponent fit and the cost model's arithmetic on known answers, and the synthetic store's determinism."""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "benchmarks"))
import bench_scaling  # noqa: E402

import cost_model  # noqa: E402
from floor import products_flops  # noqa: E402


def test_the_quick_run_prints_one_row_per_case_with_both_paths(capsys):
    """--quick: d in {64, 128} at N = 20k and N in {20k, 40k} at d = 64, three cases; the budget puts them on
    both paths; every measurement is there and the summary lines are printed (about 25 s on 2 cores)."""
    table = bench_scaling.main(["--quick"])
    assert list(zip(table["d"], table["N"])) == [(64, 20_000), (64, 40_000), (128, 20_000)]
    assert set(table["mode"]) == {"whole", "chunks"}
    for column in ("a_s", "f_s", "a/f", "a'_s", "a'/f", "peak_MB", "a'_peak_MB", "model_peak_MB", "model_GFLOP"):
        assert (table[column] > 0).all(), column
    assert (table["peak_MB"] < bench_scaling.QUICK_BUDGET_MB * 1.1).all()
    out = capsys.readouterr().out
    for start in ("time ~ N^", "time ~ d^", "peak RSS / budget", "(a)/(f)", "(a')/(f)", "flagged"):
        assert any(line.startswith(start) for line in out.splitlines()), start


def test_the_fitted_exponent_is_the_slope_in_log_log():
    x = np.array([75_000, 300_000, 1_200_000])
    assert bench_scaling.fitted_exponent(x, 2.5 * x**1.3) == pytest.approx(1.3, abs=1e-12)
    # noisy: the least-squares slope of log y on log x, by hand (x = 1, 2, 4: log x = 0, l, 2l)
    y = np.array([1.0, 2.2, 3.9])
    l2 = np.log(2)
    ly = np.log(y)
    slope = ((0 - l2) * (ly[0] - ly.mean()) + 0 + (2 * l2 - l2) * (ly[2] - ly.mean())) / (2 * l2**2)
    assert bench_scaling.fitted_exponent([1, 2, 4], y) == pytest.approx(slope, rel=1e-12)


def test_the_cases_are_every_d_at_the_base_n_and_every_n_at_the_base_d():
    assert bench_scaling.cases(bench_scaling.FULL) == [
        (384, 300_000), (768, 75_000), (768, 300_000), (768, 1_200_000), (1536, 300_000), (3072, 300_000)]  # fmt: skip


def test_the_cost_model_arithmetic():
    # the floor (syrk: each symmetric product's upper triangle): N d^2 + per word n min(n, d) d
    assert products_flops(1000, 10, [5, 20]) == 1000 * 100 + 5 * 5 * 10 + 20 * 10 * 10  # 102,250
    # a layer that fits: N d^2 + n m d (m = 5; m = d for n = 20 > d) + no Lanczos (n <= 24) + 10 N d + 6 O d
    whole = cost_model.measure_cost(1000, 10, [5, 20], 600)
    assert whole["flops"] == 100_000 + (250 + 2_000) + 0 + 100_000 + 6 * 25 * 10
    assert whole["whole"] and whole["bytes_read"] == 1000 * 10 * 2 and whole["bytes_written"] == 0
    assert whole["peak_mb"] == pytest.approx(512 + 8 * 100 * 8 / 2**20 + 1000 * 10 * 4 / 2**20)
    # a word's rows: n up to 48, then padded to a multiple of 32, capped at d (here 100)
    assert cost_model.gram_rows(np.array([30, 49, 64, 65]), 100).tolist() == [30, 64, 64, 96]
    # in chunks (520 MB leave 7.75 MB beside the fixed part): the shift's 65,536 rows, one pass, the spill
    # written once and read back once; the peak is the fixed part and half of the rest
    chunks = cost_model.measure_cost(1_000_000, 64, [100] * 10, 520)
    spill = 1000 * 64 * 2
    assert not chunks["whole"]
    assert chunks["bytes_read"] == 65_536 * 64 * 2 + 1_000_000 * 64 * 2 + spill and chunks["bytes_written"] == spill
    fixed = 512 + 8 * 64 * 64 * 8 / 2**20
    assert chunks["peak_mb"] == pytest.approx(fixed + (520 - fixed) / 2)
    assert chunks["flops"] == 1e6 * 64**2 + 10 * 100 * 64 * 64 + 10 * 48 * 64**2 + 10 * 1e6 * 64 + 6 * 1000 * 64
    # the default settings read the layer twice in chunks (four times with massive activations)
    full = cost_model.measure_cost(1_000_000, 64, [100] * 10, 520, full=True, massive=True)
    assert full["passes"] == 4 and full["flops"] > chunks["flops"]
    # extraction: docs/scaling.md's BERT-base shard job, 3,843 MB; 2 P T FLOPs; the store
    bert = cost_model.extraction_cost(110e6, 330_000, 13, 768)
    assert bert["flops"] == 2 * 110e6 * 330_000
    assert bert["peak_mb"] == pytest.approx(
        1000 + 880 + 64 * 128 * 13 * 768 * 8 / 1e6 + 4 * 64 * 64 * 13 * 768 * 8 / 1e6
    )
    assert round(bert["peak_mb"]) == 3843
    assert cost_model.store_bytes(330_000, 13, 768) == 6_589_440_000
    # the corpus model: 1,500 rows -> 100 types, 85% indexed, rank 1 gets 1 / H_100 of them
    sizes = cost_model.expected_word_sizes(1500)
    assert sizes[0] == int(0.85 * 1500 / sum(1 / r for r in range(1, 101)))
    assert (sizes >= 5).all() and (np.diff(sizes) <= 0).all()


def test_the_estimates_table_has_every_model_and_corpus():
    table = cost_model.estimates()
    assert len(table) == 6 and set(table["corpus"]) == {"STS", "10 x STS"}
    bert = table[(table["model"] == "bert-base") & (table["corpus"] == "STS")].iloc[0]
    assert bert["store_GB"] == pytest.approx(6.58944) and bert["mode"] == "whole"
    assert (table["peak_MB/job"] <= 2048).all()


def test_the_synthetic_store_is_seeded_and_realistic(tmp_path):
    """The same seed writes the same bytes (every file); the store reads as the pipeline's does; a third of the
    words have two senses, the rogue dimensions have the largest means; words are indexed from 5 occurrences."""

    def digests(folder):
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip

    first = bench_scaling.write_store(tmp_path / "a", 6_000, 32, seed=1)
    bench_scaling.write_store(tmp_path / "b", 6_000, 32, seed=1)
    bench_scaling.write_store(tmp_path / "c", 6_000, 32, seed=2)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")
    assert set(digests(tmp_path / "a")) == {"layers/layer_01.h5", "manifest.json", "occurrences.parquet",
                                           "shards/shard_0.h5", "shards/shard_1.h5", "units.parquet"}  # fmt: skip
    assert digests(tmp_path / "a")["shards/shard_0.h5"] != digests(tmp_path / "c")["shards/shard_0.h5"]

    from contextuality.store.reader import LayerReader, read_manifest

    with LayerReader(first.layer, read_manifest(first.manifest)) as reader:  # the pipeline's checks
        X = reader.rows(dtype=np.float32)
        assert X.shape == (6_000, 32) and reader.offsets[-1] == 6_000
    occurrences = pd.read_parquet(first.occurrences)
    assert occurrences["word"].astype(str).is_monotonic_increasing
    counts = occurrences["word"].value_counts()
    assert counts.min() >= 5 and sorted(counts, reverse=True) == first.sizes.tolist()
    means = np.abs(X.mean(axis=0))
    assert np.sort(means)[-3:].min() > 3 * np.sort(means)[-4]  # three rogue dimensions
    assert 8 <= np.diff(reader.offsets).mean() <= 16  # STS-like sentences


def test_a_layer_file_is_the_same_bytes_a_second_later(tmp_path):
    """The layer file's virtual dataset carries no creation time (HDF5's default for one, which h5py keeps):
    the same shards written a second apart give byte-identical layer files."""
    import time

    bench_scaling.write_store(tmp_path / "a", 3_000, 16, seed=1)
    time.sleep(1.1)
    bench_scaling.write_store(tmp_path / "b", 3_000, 16, seed=1)
    layer = "layers/layer_01.h5"
    assert (tmp_path / "a" / layer).read_bytes() == (tmp_path / "b" / layer).read_bytes()
