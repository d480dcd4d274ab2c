"""The measurement step on a tiny fake model directory laid out as in docs/data-contract.md."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import measure_model, measure_settings
from contextuality.measure import combine, layer_finish, layer_job, layer_result
from contextuality.measure.engine import panel
from contextuality.measure.reference import measures as reference
from contextuality.measure.reference.exact_baseline import exact_baseline
from contextuality.measure.reference.postprocess import abtt
from contextuality.measure.reference.word_pcs import pc_stats_by_word
from contextuality.paper import MIN_BASELINE_VECTORS
from contextuality.report.claims import EXACT_COLUMNS
from contextuality.store.files import StoreError
from contextuality.store.reader import read_layer
from test_data_contract import contract

# 120 sentences: the sampled baselines are reported from 100 vectors or more (MIN_BASELINE_VECTORS)
N_SENTENCES, DIM, LAYERS = 120, 16, (0, 1, 2)
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


def run(paths, occurrences, out, seed=0, out_postprocess=None, out_rogue=None, **metrics):
    outputs = {
        "out_words": out / "words.parquet", "out_layers": out / "layers.parquet",
        "out_pcs_dir": out / "pcs", "out_context_words": out / "context_specific_words.csv",
    }  # fmt: skip
    settings = measure_settings(seed=seed, **{"intra_sentences": 20, "baseline_samples": 110, "bootstrap_resamples": 200,
                                              **metrics})  # fmt: skip
    measure_model(paths, occurrences, **outputs, settings=settings, model="fake", top_k=2,
                          out_postprocess=out_postprocess, out_rogue=out_rogue)  # fmt: skip
    return outputs


def output_files(out):
    return sorted(p for p in out.rglob("*") if p.is_file())


def test_measure_model_writes_the_contract(fake_model, tmp_path):
    paths, occurrences = fake_model
    outputs = run(paths, occurrences, tmp_path / "a", self_similarity="both")
    words = pd.read_parquet(outputs["out_words"])
    layers = pd.read_parquet(outputs["out_layers"])
    contract_words = contract()["results/metrics/{corpus}/{model}/words.parquet"]["Columns"]  # docs/data-contract.md
    assert list(words.columns[: len(contract_words)]) == contract_words
    assert set(layer_result.LAYER_COLUMNS[:22]) <= set(layers.columns)
    assert len(words) == len(WORDS) * len(LAYERS) and list(layers["layer"]) == list(LAYERS)
    assert (words.groupby("word")["n"].first() == occurrences.groupby("word").size()).all()

    for column in ["self_similarity", "self_similarity_sampled", "baseline_cosine", "intra_sentence"]:
        values = pd.concat(
            [words.get(column, pd.Series(dtype=float)), layers.get(column, pd.Series(dtype=float))]
        ).dropna()
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
    np.testing.assert_allclose(
        layers["adjusted_self_similarity"], layers["self_similarity"] - layers["baseline_cosine"]
    )
    np.testing.assert_allclose(layers["adjusted_mev"], layers["mev"] - layers["baseline_mev"])
    assert (layers["self_similarity_ci_low"].iloc[1:] <= layers["self_similarity"].iloc[1:]).all()
    assert (layers["n_sentences_sampled"] <= 20).all() and layers["n_baseline_vectors"].between(100, 110).all()

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
    with pytest.raises(
        StoreError, match=r"layer_2\.h5: incomplete \(no 'complete' marker\); delete it and rerun snakemake"
    ):
        run(paths, occurrences, tmp_path / "x")
    with pytest.raises(StoreError, match="layer_2.h5"):
        read_layer(paths[2])
    assert not (tmp_path / "x" / "words.parquet").exists()


def test_read_layer_keeps_the_stored_dtype_or_converts(fake_model):
    paths, _ = fake_model
    stored, _ = read_layer(paths[1])
    assert stored.dtype == np.float16
    vectors, offsets = read_layer(paths[1], dtype=np.float32)
    assert vectors.dtype == np.float32 and offsets.dtype == np.int64
    np.testing.assert_array_equal(vectors, stored.astype(np.float32))
    assert offsets[-1] == len(vectors) and vectors.shape[1] == DIM


# --------------------------------------------------------------------------------------------------
# Exact baselines, degenerate words, the geometry panel and the post-processed variants (one read)


def units_table(paths, occurrences):
    """A units.parquet for the fake model: every row a unit, named by its word (or 'x'), with its position."""
    vectors, offsets = read_layer(paths[0])
    n = len(vectors)
    unit = np.full(n, "x", dtype=object)
    unit[occurrences["row"].to_numpy()] = occurrences["word"].to_numpy()
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return pd.DataFrame({"row": np.arange(n), "unit": unit, "position": np.arange(n) - offsets[sentence]})


def test_one_read_of_the_layer_gives_every_measure(fake_model, monkeypatch):
    """The paper's measures, the exact baselines, the geometry panel and three variants: one read of the vectors."""
    from contextuality.store import reader

    paths, occurrences = fake_model
    units = units_table(paths, occurrences)
    reads = []
    original = reader.LayerReader.rows

    def counting(self, *args, **kwargs):
        reads.append((self.path, args, kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(reader.LayerReader, "rows", counting)
    settings = measure_settings(seed=3, intra_sentences=20, baseline_samples=110, bootstrap_resamples=50,
                                postprocess=["none", "standardize", "abtt"], geometry_sample=200)  # fmt: skip
    result = layer_job.measure_layer(paths[2], 2, occurrences, settings, model="fake", units=units)
    assert len(reads) == 1  # once, the whole layer (no row range), converted to the compute dtype as it is read
    assert reads[0][0] == paths[2] and reads[0][1] == () and set(reads[0][2]) <= {"dtype"}
    assert [row["postprocess"] for row in result.postprocess] == ["none", "standardize", "abtt"]
    assert np.isfinite(result.row["isoscore"]) and np.isfinite(result.row["baseline_cosine_exact"])


def test_new_columns_against_their_definitions(fake_model):
    paths, occurrences = fake_model
    units = units_table(paths, occurrences)
    settings = measure_settings(seed=5, intra_sentences=20, baseline_samples=110, bootstrap_resamples=50,
                                geometry_sample=150, twonn_sample=100)  # fmt: skip
    result = layer_job.measure_layer(paths[2], 2, occurrences, settings, model="fake", units=units)
    record = result.row
    vectors, offsets = read_layer(paths[2])
    # exact baselines: exact_baseline of the layer; adjusted values against them
    exact = exact_baseline(vectors, offsets)
    for column, value in (
        ("baseline_cosine_exact", exact.cosine),
        ("baseline_cosine_exact_between", exact.cosine_between),
        ("baseline_cosine_uniform", exact.cosine_uniform),
        ("baseline_mev_exact", exact.mev),
    ):
        assert record[column] == pytest.approx(value, abs=1e-6), column
    assert record["adjusted_self_similarity_exact"] == pytest.approx(record["self_similarity"] - exact.cosine, abs=1e-6)
    assert record["adjusted_intra_sentence_exact"] == pytest.approx(record["intra_sentence"] - exact.cosine, abs=1e-6)
    assert record["adjusted_mev_exact"] == pytest.approx(record["mev"] - exact.mev, abs=1e-6)
    # the paper-faithful columns are still the sampled estimate
    assert record["adjusted_self_similarity"] == record["self_similarity"] - record["baseline_cosine"]
    # geometry: geometry_panel's row, with the paper's weights and the same random stream
    weights = np.repeat(1.0 / (np.count_nonzero(np.diff(offsets)) * np.maximum(np.diff(offsets), 1)), np.diff(offsets))
    want = panel.geometry_panel(vectors, layer_finish.stream(5, layer_finish.GEOMETRY, 2), 150, weights=weights,
                                units=units["unit"].to_numpy(object), positions=units["position"].to_numpy(),
                                twonn_sample_size=100)  # fmt: skip
    for column, value in want.items():
        if isinstance(value, str):
            assert record[column] == value, column
        else:
            np.testing.assert_allclose(record[column], value, rtol=1e-5, atol=1e-6, err_msg=column)
    assert set(panel.GEOMETRY_COLUMNS) == set(want)
    assert record["geometry_sample"] == 150 and record["after_final_norm"] == 0
    np.testing.assert_allclose(np.sum(result.rogue), record["rogue_anisotropy"], atol=1e-9)


def test_degenerate_words_are_counted_and_have_no_mev(fake_model):
    """Layer 0 of the fake model is static: every word's occurrences are one vector (degenerate)."""
    paths, occurrences = fake_model
    settings = measure_settings(seed=1, mev_layer0=True, geometry=False)
    static = layer_job.measure_layer(paths[0], 0, occurrences, settings, model="fake")
    assert static.row["n_degenerate_words"] == len(WORDS)
    assert static.words["mev"].isna().all()
    moving = layer_job.measure_layer(
        paths[1], 1, occurrences, dataclasses.replace(settings, mev_layer0=False), model="fake"
    )
    assert moving.row["n_degenerate_words"] == 0 and moving.words["mev"].notna().all()
    assert static.row["rogue_top1_share"] != static.row["rogue_top1_share"]  # no panel: NaN
    assert static.row["rogue_dims"] == "" and np.isnan(static.rogue).all()


def test_variants_are_the_measures_of_transformed_vectors(fake_model, tmp_path):
    """postprocess.csv: 'none' repeats the layer's own row; 'abtt' is the paper's measures of postprocess.abtt(X)."""
    paths, occurrences = fake_model
    settings = measure_settings(seed=2, intra_sentences=20, baseline_samples=110, bootstrap_resamples=50,
                                postprocess=["none", "abtt"], geometry=False)  # fmt: skip
    result = layer_job.measure_layer(paths[2], 2, occurrences, settings, model="fake")
    none, abtt_row = result.postprocess
    for column in (
        "self_similarity",
        "intra_sentence",
        "mev",
        "baseline_cosine",
        "baseline_mev",
        "baseline_cosine_exact",
        "adjusted_self_similarity",
        "adjusted_mev_exact",
        "n_degenerate_words",
        "mev_ci_low",
    ):
        assert none[column] == result.row[column], column
    vectors, offsets = read_layer(paths[2])
    transformed = abtt(vectors)
    index = layer_job.OccurrenceIndex(occurrences)
    X = transformed[index.rows]
    assert abtt_row["self_similarity"] == pytest.approx(
        np.nanmean(reference.self_similarity_exact(X, index.group_starts)), abs=1e-6
    )
    assert abtt_row["mev"] == pytest.approx(np.nanmean(pc_stats_by_word(X, index.group_starts).mev), abs=1e-5)
    ids = layer_finish.stream(2, layer_finish.SENTENCE_SAMPLE).permutation(len(offsets) - 1)
    intra = reference.intra_sentence_similarity(transformed, offsets, ids[:20])
    assert abtt_row["intra_sentence"] == pytest.approx(np.nanmean(intra), abs=1e-6)
    baseline = reference.anisotropy_baseline(
        transformed, offsets, ids[:110], layer_finish.stream(2, layer_finish.BASELINE, 2), 110
    )
    assert abtt_row["baseline_cosine"] == pytest.approx(baseline.cosine, abs=1e-6)
    assert abtt_row["baseline_cosine_exact"] == pytest.approx(exact_baseline(transformed, offsets).cosine, abs=1e-6)
    with pytest.raises(ValueError, match="unknown post-processing"):  # for a direct caller (the schema refuses it)
        layer_job.measure_layer(paths[2], 2, occurrences, dataclasses.replace(settings, postprocess=("whiten",)),
                                model="fake")  # fmt: skip


def test_tables_carry_the_new_columns_and_stay_byte_identical(fake_model, tmp_path):
    paths, occurrences = fake_model
    outputs = []
    for name in ("a", "b"):
        out = tmp_path / name
        settings = dict(postprocess=["none", "standardize", "abtt"], geometry_sample=120, twonn_sample=60)
        run(paths, occurrences, out, seed=9, out_postprocess=out / "postprocess.csv", out_rogue=out / "rogue.csv",
            **settings)  # fmt: skip
        outputs.append(out)
    for a, b in zip(output_files(outputs[0]), output_files(outputs[1])):
        assert a.read_bytes() == b.read_bytes(), a.name
    layers = pd.read_parquet(outputs[0] / "layers.parquet")
    assert list(layers.columns) == layer_result.LAYER_COLUMNS
    assert layers["n_degenerate_words"].tolist() == [len(WORDS), 0, 0]
    post = pd.read_csv(outputs[0] / "postprocess.csv")
    assert list(post.columns) == layer_result.POSTPROCESS_COLUMNS
    assert post.groupby("layer")["postprocess"].apply(list).tolist() == [["none", "standardize", "abtt"]] * 3
    rogue = pd.read_csv(outputs[0] / "rogue.csv")
    assert list(rogue.columns) == combine.ROGUE_COLUMNS and len(rogue) == len(LAYERS) * DIM
    sums = rogue.groupby("layer")["contribution"].sum().to_numpy()
    np.testing.assert_allclose(sums, layers["rogue_anisotropy"], atol=1e-5)


def test_after_final_norm_comes_from_the_layer_file(fake_model):
    paths, occurrences = fake_model
    with h5py.File(paths[2], "a") as f:
        f.attrs["after_final_norm"] = 1
    result = layer_job.measure_layer(paths[2], 2, occurrences, measure_settings(seed=1, geometry=False), model="fake")
    assert result.row["after_final_norm"] == 1


def test_float64_compute_matches_float32(fake_model):
    paths, occurrences = fake_model
    settings = measure_settings(seed=4, geometry=False, postprocess=["none", "standardize"], compute_dtype="float32")
    a = layer_job.measure_layer(paths[2], 2, occurrences, settings, model="fake")
    b = layer_job.measure_layer(
        paths[2], 2, occurrences, dataclasses.replace(settings, compute_dtype="float64"), model="fake"
    )
    for column in ("self_similarity", "mev", "mev_centered", "baseline_cosine_exact", "baseline_mev_exact"):
        assert a.row[column] == pytest.approx(b.row[column], abs=1e-6), column
    assert a.postprocess[1]["mev"] == pytest.approx(b.postprocess[1]["mev"], abs=1e-6)
    with pytest.raises(ValueError, match="compute_dtype"):  # for a direct caller (the schema refuses it)
        layer_job.measure_layer(paths[2], 2, occurrences, dataclasses.replace(settings, compute_dtype="float16"),
                                model="fake")  # fmt: skip


def test_a_layer_drawing_fewer_than_100_baseline_vectors_reports_its_sampled_baselines_as_na(fake_model):
    """30 sampled sentences: 1 in 30 sampled pairs is a vector with itself (cosine 1); with one sentence the
    baseline was 1.000. Below MIN_BASELINE_VECTORS the sampled baselines and the values
    adjusted by them are NaN; the exact ones stay, and the claims take them."""
    paths, occurrences = fake_model
    settings = measure_settings(seed=5, intra_sentences=20, baseline_samples=30, bootstrap_resamples=0, geometry=False)
    row = layer_job.measure_layer(paths[2], 2, occurrences, settings, model="fake").row
    assert row["n_baseline_vectors"] == 30 < MIN_BASELINE_VECTORS
    for column in EXACT_COLUMNS:  # the sampled baselines and the values adjusted by them, each with its exact twin
        assert np.isnan(row[column]), column
    for column in ("baseline_cosine_exact", "baseline_mev_exact", "adjusted_self_similarity_exact", "self_similarity"):
        assert np.isfinite(row[column]), column
