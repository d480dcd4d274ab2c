"""The measurement step on a tiny fake model directory laid out as in docs/data-contract.md."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest

from contextuality import analysis
from contextuality.store import StoreError

N_SENTENCES, DIM, LAYERS = 40, 16, (0, 1, 2)
WORDS = ["alpha", "beta", "gamma", "delta", "the"]


def write_layer(path, vectors, offsets, layer, complete=1):
    with h5py.File(path, "w") as f:
        f.create_dataset("vectors", data=vectors.astype(np.float16))
        f.create_dataset("sentence_offsets", data=offsets)
        f.attrs.update({"model": "fake", "layer": layer, "n_layers": len(LAYERS), "dim": DIM, "dtype": "float16"})
        f.attrs["complete"] = complete


@pytest.fixture
def fake_model(tmp_path):
    """Layer files where each word's vectors scatter around its own direction, more so in upper layers.

    Layer 0 is static: every occurrence of a word has the same vector, as in ELMo's input layer.
    """
    rng = np.random.default_rng(3)
    lengths = rng.integers(3, 10, size=N_SENTENCES)
    lengths[5] = 0  # a sentence with no stored unit
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n_rows = int(offsets[-1])
    word_of_row = rng.choice(len(WORDS) + 1, size=n_rows)  # the last label marks rows that are not indexed
    directions = rng.normal(size=(len(WORDS) + 1, DIM)) + 1.0
    paths = {}
    for layer in LAYERS:
        vectors = directions[word_of_row] + layer * 0.6 * rng.normal(size=(n_rows, DIM))
        paths[layer] = tmp_path / "embeddings" / f"layer_{layer}.h5"
        paths[layer].parent.mkdir(exist_ok=True)
        write_layer(paths[layer], vectors, offsets, layer)
    sentence_of_row = np.repeat(np.arange(N_SENTENCES), lengths)
    indexed = np.flatnonzero(word_of_row < len(WORDS))
    occurrences = pd.DataFrame({
        "word": np.array(WORDS)[word_of_row[indexed]], "row": indexed.astype(np.int64),
        "sentence_id": sentence_of_row[indexed], "position": indexed - offsets[sentence_of_row[indexed]],
    }).sort_values(["word", "row"], ignore_index=True)  # fmt: skip
    return paths, occurrences


def run(paths, occurrences, out, seed=0, **options):
    outputs = {
        "out_words": out / "words.parquet", "out_layers": out / "layers.parquet",
        "out_pcs_dir": out / "pcs", "out_context_words": out / "context_specific_words.csv",
    }  # fmt: skip
    settings = {"intra_sentences": 20, "baseline_samples": 30, "bootstrap_resamples": 200, "top_k": 2, **options}
    analysis.measure_model(paths, occurrences, **outputs, model="fake", seed=seed, **settings)
    return outputs


def output_files(out):
    return sorted(p for p in out.rglob("*") if p.is_file())


def test_measure_model_writes_the_contract(fake_model, tmp_path):
    paths, occurrences = fake_model
    outputs = run(paths, occurrences, tmp_path / "a", self_similarity="both")
    words = pd.read_parquet(outputs["out_words"])
    layers = pd.read_parquet(outputs["out_layers"])
    contract_words = ["model", "word", "layer", "n", "self_similarity", "self_similarity_sampled", "mev", "mev_literal", "mev_centered"]
    assert list(words.columns[: len(contract_words)]) == contract_words
    assert set(analysis.LAYER_COLUMNS[:22]) <= set(layers.columns)
    assert len(words) == len(WORDS) * len(LAYERS) and list(layers["layer"]) == list(LAYERS)
    assert (words.groupby("word")["n"].first() == occurrences.groupby("word").size()).all()

    for column in ["self_similarity", "self_similarity_sampled", "baseline_cosine", "intra_sentence"]:
        values = pd.concat([words.get(column, pd.Series(dtype=float)), layers.get(column, pd.Series(dtype=float))]).dropna()
        assert values.between(-1 - 1e-12, 1 + 1e-12).all(), column
    upper = words[words["layer"] >= 1]
    for column in ["mev", "mev_literal", "mev_centered"]:
        assert upper[column].between(0, 1).all(), column
        assert words.loc[words["layer"] == 0, column].isna().all()
    assert layers["baseline_mev"].between(0, 1).all()

    static = words[words["layer"] == 0]
    np.testing.assert_allclose(static["self_similarity"], 1.0, atol=1e-9)
    np.testing.assert_allclose(static["self_similarity_sampled"], 1.0, atol=1e-9)
    assert (upper.groupby("layer")["self_similarity"].mean().diff().dropna() < 0).all()
    np.testing.assert_allclose(layers["adjusted_self_similarity"], layers["self_similarity"] - layers["baseline_cosine"])
    np.testing.assert_allclose(layers["adjusted_mev"], layers["mev"] - layers["baseline_mev"])
    assert (layers["self_similarity_ci_low"].iloc[1:] <= layers["self_similarity"].iloc[1:]).all()
    assert (layers["n_sentences_sampled"] <= 20).all() and (layers["n_baseline_vectors"] <= 30).all()

    pc_files = sorted(p.name for p in outputs["out_pcs_dir"].iterdir())
    assert pc_files == ["layer_00.txt", "layer_01.txt", "layer_02.txt"]  # layer 0: Table 1's static baseline
    lines = (outputs["out_pcs_dir"] / "layer_01.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == sorted(WORDS)
    vectors = np.array([[float(x) for x in line.split()[1:]] for line in lines])
    assert vectors.shape == (len(WORDS), DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    context = pd.read_csv(outputs["out_context_words"])
    assert list(context.columns) == ["rank", "kind", "word", "mean_self_similarity", "n"]
    assert sorted(context["kind"].unique()) == ["least_context_specific", "most_context_specific"]
    most = context[context["kind"] == "most_context_specific"]
    assert list(most["rank"]) == [1, 2] and most["mean_self_similarity"].is_monotonic_increasing
    assert not any(p.name.startswith(".") for p in output_files(tmp_path / "a"))


def test_same_seed_same_bytes_other_seed_other_samples(fake_model, tmp_path):
    paths, occurrences = fake_model
    run(paths, occurrences, tmp_path / "first", seed=11, self_similarity="both")
    run(paths, occurrences, tmp_path / "again", seed=11, self_similarity="both")
    first, again = output_files(tmp_path / "first"), output_files(tmp_path / "again")
    assert [p.relative_to(tmp_path / "first") for p in first] == [p.relative_to(tmp_path / "again") for p in again]
    for a, b in zip(first, again):
        assert a.read_bytes() == b.read_bytes(), a.name

    run(paths, occurrences, tmp_path / "other", seed=12, self_similarity="both")
    layers_first = pd.read_parquet(tmp_path / "first" / "layers.parquet")
    layers_other = pd.read_parquet(tmp_path / "other" / "layers.parquet")
    assert not np.allclose(layers_first["baseline_cosine"], layers_other["baseline_cosine"])
    words_first = pd.read_parquet(tmp_path / "first" / "words.parquet")
    words_other = pd.read_parquet(tmp_path / "other" / "words.parquet")
    np.testing.assert_array_equal(words_first["self_similarity"], words_other["self_similarity"])
    np.testing.assert_array_equal(words_first["mev"], words_other["mev"])


def test_sampled_only_and_layer0_mev(fake_model, tmp_path):
    paths, occurrences = fake_model
    outputs = run(paths, occurrences, tmp_path / "s", self_similarity="sampled", mev_layer0=True, intra_sentences="all")
    words = pd.read_parquet(outputs["out_words"])
    layers = pd.read_parquet(outputs["out_layers"])
    assert words["self_similarity"].isna().all()
    np.testing.assert_allclose(layers["self_similarity"], layers["self_similarity_sampled"])
    assert words.loc[words["layer"] == 0, "mev"].isna().all()  # identical vectors: no MEV (degenerate words)
    assert (layers["n_sentences_sampled"] == N_SENTENCES - 1).all()


def test_incomplete_layer_file_is_refused(fake_model, tmp_path):
    paths, occurrences = fake_model
    with h5py.File(paths[2], "a") as f:
        f.attrs["complete"] = 0
    with pytest.raises(StoreError, match=r"layer_2\.h5: incomplete \(no 'complete' marker\); delete it and rerun snakemake"):
        run(paths, occurrences, tmp_path / "x")
    with pytest.raises(StoreError, match="layer_2.h5"):
        analysis.read_layer(paths[2])
    assert not (tmp_path / "x" / "words.parquet").exists()


def test_read_layer_keeps_the_stored_dtype_or_converts(fake_model):
    paths, _ = fake_model
    stored, _ = analysis.read_layer(paths[1])
    assert stored.dtype == np.float16
    vectors, offsets = analysis.read_layer(paths[1], dtype=np.float32)
    assert vectors.dtype == np.float32 and offsets.dtype == np.int64
    np.testing.assert_array_equal(vectors, stored.astype(np.float32))
    assert offsets[-1] == len(vectors) and vectors.shape[1] == DIM
