"""ELMo as a pipeline model: the 'elmo' source, then the same extraction and storage path as the others."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import (
    PROJECT,
    extract_planned,
    job_counts,
    materialise,
    run_snakemake,
    with_absolute_data_paths,
    write_config,
)
from contextuality.corpus.words import word_table
from contextuality.extraction.encoders import load_encoder
from contextuality.models.elmo import ElmoEmbedder
from contextuality.models.loading import ModelError
from contextuality.models.sources import write_source_record
from contextuality.workflow.schema import load_settings

GOLDEN = PROJECT / "tests" / "data" / "elmo-golden"
SENTENCES = ["The dog runs .", "A cat sleeps on the mat, and the dog runs!", "Dogs run."]


@pytest.fixture
def elmo_record(tmp_path) -> tuple[dict, dict]:
    spec = {"source": "elmo", "options": str(GOLDEN / "options.json"), "weights": str(GOLDEN / "lm_weights.hdf5")}
    record = materialise("elmo", spec, tmp_path / "elmo")
    write_source_record(record, tmp_path / "elmo" / "source.json")
    return record, spec


def test_elmo_source_copies_and_checksums_the_files(elmo_record, tmp_path):
    record, spec = elmo_record
    assert (tmp_path / "elmo" / "model" / "weights.hdf5").read_bytes() == (GOLDEN / "lm_weights.hdf5").read_bytes()
    assert (record["n_layers"], record["dim"]) == (3, 32)
    assert json.loads((tmp_path / "elmo" / "source.json").read_text())["weights_sha256"] == record["weights_sha256"]
    with pytest.raises(ModelError, match="sha256 .* differs"):
        materialise("elmo", {**spec, "sha256": "0" * 64}, tmp_path / "other")


def test_elmo_extraction_stores_spacy_words_and_three_layers(elmo_record, tmp_path):
    record, spec = elmo_record
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    words = word_table(sentences)
    loaded = load_encoder(
        "elmo", load_settings({"models": {"elmo": spec}}).shard("elmo"), record, tmp_path / "elmo" / "model", "cpu"
    )
    extract_planned(loaded, sentences, words, tmp_path, indexing="word", batch_size=2)
    units = pd.read_parquet(tmp_path / "units.parquet")
    assert units["unit"].tolist() == words["word"].tolist()
    direct = ElmoEmbedder(GOLDEN / "options.json", GOLDEN / "lm_weights.hdf5")
    with h5py.File(tmp_path / "shard.h5") as shard:
        assert shard.attrs["n_layers"] == 3 and shard.attrs["dim"] == 32
        offsets = shard["sentence_offsets"][:]
        stored = np.stack([shard[f"layer_{layer:02d}"][:] for layer in range(3)])
    for i in range(len(SENTENCES)):
        tokens = words[words["sentence_id"] == i]["word"].tolist()
        expected = direct.embed_batch([tokens])[0]
        np.testing.assert_allclose(stored[:, offsets[i] : offsets[i + 1]], expected, atol=1e-5)
        layer0 = stored[0, offsets[i] : offsets[i + 1]]
        np.testing.assert_array_equal(layer0[:, :16], layer0[:, 16:])  # the token layer, duplicated


def test_paper_config_plans_elmo_next_to_bert_and_gpt2(tmp_path):
    config = with_absolute_data_paths(yaml.safe_load((PROJECT / "config" / "paper.yaml").read_text()))
    result = run_snakemake(tmp_path, "-n", "--cores", "2", configfile=write_config(tmp_path / "paper.yaml", config))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    counts = job_counts(result.stdout)
    # ELMo, BERT, and GPT-2 twice: its own tokenization and the paper's (gpt2-faithful)
    assert counts["download_model"] == 4 and counts["materialise_model"] == 4
    # the per-layer jobs follow once each model is built (its layer count is a checkpoint's output)
    # ELMo (stateful) in one shard, the others in 8; once over STS and once over the senses' usages corpus
    assert counts["extract"] == 2 * (1 + 3 * 8) and counts["combine_layers"] == 4 and "measure_layer" not in counts
    assert "resources/models/elmo/source.json" in result.stdout
