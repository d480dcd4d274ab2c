"""Guarantees of the similarity stage around the engine (spec similarity-atlas 8.3, groups 8-10): the models'
rows are joined by what they are, never by position; a sample of other rows is refused; a subword model's
pooled pieces are its word-indexed rows; the device path gives the store path's tables; reruns give the same
bytes, and a new sample size reruns only the similarity rules."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import (
    extract_planned,
    gather_layers,
    job_counts,
    random_model_on,
    run_snakemake,
    write_config,
)
from contextuality.measure.similarity import join as joined
from contextuality.measure.similarity import tables
from contextuality.measure.similarity.sample import gather, gather_from_store, write_sample
from contextuality.measure.similarity.tables import read_table
from contextuality.measure.similarity_job import sample_attrs
from contextuality.measure.similarity_table_job import load_sample, run_similarity_model
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader
from contextuality.workflow.schema import load_settings
from workflow_runs import smoke_config_path

SETTINGS = load_settings({"models": {}, "similarity": {"null_draws": 5, "knn_k": 3}}).similarity


# --------------------------------------------------------------------------------------------------
# 8. Rows: joined, never shifted


def _index(words_per_sentence: list[int]) -> pd.DataFrame:
    return pd.DataFrame(
        [(f"w{s}_{p}", s, p) for s, n in enumerate(words_per_sentence) for p in range(n)],
        columns=["word", "sentence_id", "position"],
    )


def _units(index: pd.DataFrame, lost: set[tuple[int, int]] = frozenset()) -> pd.DataFrame:
    """A word-indexed model's units: one row per word it stores, in corpus order."""
    kept = index[[(s, p) not in lost for s, p in zip(index["sentence_id"], index["position"])]]
    kept = kept.sort_values(["sentence_id", "position"]).reset_index(drop=True)
    return pd.DataFrame({"row": np.arange(len(kept)), "sentence_id": kept["sentence_id"],
                         "word_position": kept["position"]})  # fmt: skip


def _layers(units: pd.DataFrame, seed: int, n_layers: int = 3, dim: int = 6) -> list[np.ndarray]:
    """Every stored row's vector, a function of the word it is (sentence, position): a shifted pairing shows."""
    keys = units["sentence_id"].to_numpy() * 1000 + units["word_position"].to_numpy()
    return [np.stack([np.random.default_rng([seed, layer, key]).normal(size=dim) for key in keys]).astype(np.float32)
            for layer in range(n_layers)]  # fmt: skip


def _flags(index: pd.DataFrame) -> pd.DataFrame:
    ids = np.unique(index["sentence_id"])
    return pd.DataFrame({"sentence_id": ids, "truncated": False, "skipped": False})


def _sampled_table(index, units: dict, seed: int = 3) -> tuple[pd.DataFrame, dict]:
    """Join, gather each model's sample from its layers, and the cross table of the two models."""
    stored = {model: joined.model_words(table, model) for model, table in units.items()}
    rows, record = joined.common_rows(index, stored, {model: _flags(index) for model in units}, seed)
    samples = {}
    for model, table in units.items():
        first, pieces = joined.sample_rows(rows, model, len(rows))
        samples[model] = [gather(layer, first, pieces, "first", "float32") for layer in _layers(table, seed=len(model))]
    a, b = units
    part = tables.variant_rows(samples[a], samples[b], variant="raw", settings=SETTINGS, seed=1, memory_mb=64,
                               knn_a=None, knn_b=None, keep=None)  # fmt: skip
    return part, record


def test_a_model_that_loses_a_word_is_joined_out_not_shifted():
    index = _index([5, 7, 6, 8, 4, 9, 6, 5])
    lost = {(1, 2)}  # model "b" stores no row for word 2 of sentence 1 (a piece spanning it and the word before)
    with_loss, record = _sampled_table(index, {"a": _units(index), "b": _units(index, lost)})
    assert record["lost"]["b"] == {"spanning": 1, "truncated": 0, "skipped": 0}
    assert record["n_common"] == len(index) - 1
    # the same values as a plan in which that word is simply not there, for both models
    without = index[[(s, p) not in lost for s, p in zip(index["sentence_id"], index["position"])]]
    reference, _ = _sampled_table(without, {"a": _units(without), "b": _units(without)})
    pd.testing.assert_frame_equal(with_loss, reference)
    # a positional pairing (row i of a against row i of b) would compare other words from sentence 1 on
    layers_a, layers_b = _layers(_units(index), seed=1), _layers(_units(index, lost), seed=1)
    assert not np.array_equal(layers_a[0][: len(layers_b[0])], layers_b[0])


def test_a_sample_gathered_from_other_rows_is_refused_in_one_line(tmp_path):
    index = _index([4, 5, 6])
    stored = {"a": joined.model_words(_units(index), "a")}
    rows, record = joined.common_rows(index, stored, {"a": _flags(index)}, seed=1)
    joined.write_rows(rows, record, tmp_path / "rows.parquet", tmp_path / "rows.json")
    first, pieces = joined.sample_rows(rows, "a", len(rows))
    layers = {layer: gather(x, first, pieces, "first", "float32") for layer, x in enumerate(_layers(_units(index), 1))}
    write_sample(
        tmp_path / "a.h5", layers, sample_attrs("a", 3, tmp_path / "rows.parquet", "p" * 64, "first", len(rows))
    )
    assert len(load_sample(tmp_path / "a.h5", tmp_path / "rows.parquet", "a", None)[0]) == 3
    # another join (another seed: another draw) is other rows
    other, record = joined.common_rows(index, stored, {"a": _flags(index)}, seed=2)
    joined.write_rows(other, record, tmp_path / "other.parquet", tmp_path / "other.json")
    with pytest.raises(StoreError) as refused:
        load_sample(tmp_path / "a.h5", tmp_path / "other.parquet", "a", None)
    message = str(refused.value)
    assert "a.h5" in message and "other rows" in message and "rerun snakemake" in message and "\n" not in message
    with pytest.raises(StoreError, match="is the sample of model 'a', not of 'b'"):
        load_sample(tmp_path / "a.h5", tmp_path / "rows.parquet", "b", None)


def test_a_word_whose_pieces_are_not_consecutive_rows_is_refused():
    units = pd.DataFrame({"row": [0, 1, 2], "sentence_id": [0, 0, 0], "word_position": [0, 1, 0]})
    with pytest.raises(StoreError, match="not consecutive rows"):
        joined.model_words(units, "m", "units.parquet")


TEXTS = [
    "The unbelievable storyteller narrates extraordinary adventures.",
    "Storytellers narrate; listeners remember unbelievable things.",
    "An extraordinary garden grows beside the riverbank.",
    "The riverbank storyteller remembers extraordinary gardens.",
] * 3


def test_a_subword_models_mean_pooled_pieces_are_its_word_rows_to_float16_rounding(tmp_path):
    sentences, words, index, loaded = random_model_on(TEXTS, tmp_path, "bert", vocab_size=120)
    stores = {}
    for name, indexing in (("sub", "subword"), ("word", "word")):
        out = tmp_path / name
        extract_planned(loaded, sentences, words, out, indexing=indexing, pooling="mean", storage_dtype="float16")
        stores[name] = (
            gather_layers([out / "shard.h5"], out / "units.parquet", out),
            pd.read_parquet(out / "units.parquet"),
        )
    stored = {name: joined.model_words(units, name) for name, (_, units) in stores.items()}
    rows, _ = joined.common_rows(index, stored, {name: _flags(index) for name in stores}, seed=1)
    assert (rows["n_pieces_sub"] > 1).any() and (rows["n_pieces_word"] == 1).all()
    for layer in range(3):
        sample = {}
        for name, (layer_files, _) in stores.items():
            first, pieces = joined.sample_rows(rows, name, len(rows))
            with LayerReader(layer_files[layer]) as reader:  # hand-made shards record no place among shards
                sample[name] = gather_from_store(reader, first, pieces, "mean" if name == "sub" else "first", "float32")
        scale = np.abs(sample["word"]).max()
        np.testing.assert_allclose(sample["sub"], sample["word"], rtol=0, atol=2e-3 * scale)


# --------------------------------------------------------------------------------------------------
# 9. The device path gives the store path's tables


def _similarity_tables(run: Path) -> dict[str, pd.DataFrame]:
    folder = run / "results" / "similarity" / "sts"
    return {str(path.relative_to(folder)): read_table(path) for path in sorted(folder.rglob("*.csv"))}


@pytest.mark.slow
def test_the_device_path_gives_the_store_paths_similarity_tables(smoke_run, device_run):
    store, device = _similarity_tables(smoke_run), _similarity_tables(device_run)
    assert set(store) == set(device) and len(store) == 3, sorted(store)  # two models, one pair
    for name, table in store.items():
        numbers = table.select_dtypes("number").columns
        pd.testing.assert_frame_equal(device[name].drop(columns=numbers), table.drop(columns=numbers))
        np.testing.assert_allclose(device[name][numbers].to_numpy(float), table[numbers].to_numpy(float),
                                   rtol=0, atol=1e-6, equal_nan=True, err_msg=name)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# 10. Reruns


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_the_same_sample_and_seed_give_byte_identical_tables(smoke_run, tmp_path):
    from threadpoolctl import threadpool_limits

    folder = smoke_run / "results" / "similarity" / "sts"
    settings = load_settings(yaml_config(smoke_config_path())).similarity
    for model in ("tiny-bert", "tiny-gpt2"):
        with threadpool_limits(limits=1):  # the job's BLAS threads (extraction.threads: 1 in the smoke config)
            run_similarity_model(corpus="sts", model=model, sample_path=folder / model / "sample.h5",
                                 rows_path=folder / "rows.parquet", settings=settings, seed=7, memory_mb=2048,
                                 out_csv=tmp_path / f"{model}.csv", out_knn=tmp_path / f"{model}.npz")  # fmt: skip
        assert _digest(tmp_path / f"{model}.csv") == _digest(folder / model / "layers.csv")
        assert _digest(tmp_path / f"{model}.npz") == _digest(folder / model / "knn.npz")


def yaml_config(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.slow
def test_a_new_sample_size_reruns_only_the_similarity_rules(smoke_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    overlay = write_config(tmp_path / "fewer_rows.yaml", {"similarity": {"max_rows": 1000, "knn_rows": 1000}})
    result = run_snakemake(workdir, "-n", "--configfile", str(smoke_config_path()), str(overlay))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert set(counts) - {"all", "total"} == {"similarity_sample", "similarity_model", "similarity_pair",
                                     "similarity_figures", "atlas"}, counts  # fmt: skip


def test_a_sample_of_every_row_is_mapped_not_held_and_checked_by_its_digest(tmp_path):
    """similarity.max_rows: null writes unchunked datasets with their sha256; the reader maps them (numpy memmaps,
    paged in by the OS as the engine reads chunks) and refuses one whose bytes changed."""
    from contextuality.measure.similarity.sample import SampleWriter, read_sample

    rows = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float16)
    writer = SampleWriter(tmp_path / "s.h5", contiguous=True)
    writer.add(0, rows)
    writer.finish({"model": "m", "n_layers": 1, "rows_sha256": "r" * 64, "provenance_sha256": "p", "pooling": "first",
                   "n_rows": 50})  # fmt: skip
    (layer,), _ = read_sample(tmp_path / "s.h5", model="m", rows_digest="r" * 64, n_rows=50)
    assert isinstance(layer, np.memmap) and np.array_equal(layer, rows)
    del layer
    import h5py

    with h5py.File(tmp_path / "s.h5", "r") as handle:
        offset = handle["layer_00"].id.get_offset()
    with open(tmp_path / "s.h5", "r+b") as handle:  # one byte of the vectors flipped
        handle.seek(offset + 7)
        byte = handle.read(1)
        handle.seek(offset + 7)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(StoreError, match="does not match its sha256"):
        read_sample(tmp_path / "s.h5", model="m", rows_digest="r" * 64, n_rows=50)


def test_every_row_on_the_device_path_is_refused_before_any_job():
    from contextuality.workflow.checks import similarity_problems

    settings = load_settings({"models": {}, "metrics": {"on_device": True}, "similarity": {"max_rows": None}})
    (problem,) = similarity_problems(settings)
    assert problem.startswith("similarity.max_rows: null") and "metrics.on_device: false" in problem
