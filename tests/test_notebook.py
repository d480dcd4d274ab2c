"""``contextuality.study``, the notebook's way in: the pipeline's tables in one call, from a model folder, a model
already loaded or a config's entry, equal to the pipeline's own on the smoke corpus; what it is given, checked
first, in one sentence naming what is allowed."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import contextuality
from conftest import materialise
from contextuality.core import layout
from contextuality.core.archive import unpacked
from contextuality.measure.engine.panel import GEOMETRY_COLUMNS
from contextuality.measure.layer_result import LAYER_COLUMNS, WORD_COLUMNS
from contextuality.notebook.inputs import model_input
from workflow_runs import smoke_config

SENTENCES = [
    "The dog runs in the park.", "A cat sleeps on the mat, and the dog runs!", "The dog and the cat play.",
    "The mat is red and the park is green.", "A dog and a cat run on the red mat.", "The cat runs to the dog.",
    "In the park the dog sleeps.", "The red cat and the green dog play in the park.",
]  # fmt: skip
RANDOM_BERT = {"source": "random", "architecture": "bert", "n_hidden_layers": 2, "hidden_size": 16, "vocab_size": 120,
               "indexing": "subword"}  # fmt: skip
# Quick measures: fewer draws than the defaults (every other setting is the schema's default)
QUICK = {"words": {"min_occurrences": 2}, "metrics": {"baseline_samples": 40, "bootstrap_resamples": 20,
                                                      "geometry_sample": 50, "twonn_sample": 40}}  # fmt: skip
PAPER_COLUMNS = [column for column in LAYER_COLUMNS if column not in GEOMETRY_COLUMNS]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random BERT's Hugging Face folder, its tokenizer trained on SENTENCES."""
    root = tmp_path_factory.mktemp("notebook-model")
    sentences = root / "sentences.parquet"
    pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES}).to_parquet(sentences)
    materialise("bert", RANDOM_BERT, root, sentences_parquet=sentences)
    return root / "model"


def test_a_folder_and_the_same_model_loaded_give_the_same_tables_and_the_panel_only_when_asked(folder):
    from transformers import AutoModel, AutoTokenizer

    from_folder = contextuality.study(folder, SENTENCES, config=QUICK, options={"indexing": "subword"}, device="cpu")
    assert from_folder.model == "model" and from_folder.device == "cpu" and from_folder.panel is None
    assert list(from_folder.layers.columns) == PAPER_COLUMNS and list(from_folder.words.columns) == WORD_COLUMNS
    assert from_folder.layers["layer"].tolist() == [0, 1, 2]
    assert from_folder.layers["self_similarity"].between(-1, 1).all() and from_folder.losses["sentences"] == 8
    loaded = AutoModel.from_pretrained(folder)
    with_panel = contextuality.study(loaded, SENTENCES, tokenizer=AutoTokenizer.from_pretrained(folder), config=QUICK,
                                     options={"indexing": "subword"}, device="cpu", panel=True)  # fmt: skip
    assert list(with_panel.panel.columns) == ["model", "layer", *GEOMETRY_COLUMNS]
    assert with_panel.panel["effective_rank"].notna().all()
    # the geometry panel draws its own rows: the paper's measures are the same bytes with it or without it
    pd.testing.assert_frame_equal(with_panel.layers, from_folder.layers, check_exact=True)
    pd.testing.assert_frame_equal(with_panel.words, from_folder.words, check_exact=True)


def test_a_config_entry_is_built_as_the_pipeline_builds_it_and_a_key_of_the_config_names_it():
    config = {**QUICK, "models": {"tiny": RANDOM_BERT}}
    by_key = contextuality.study("tiny", SENTENCES, config=config, device="cpu")
    by_entry = contextuality.study(RANDOM_BERT, SENTENCES, config=QUICK, device="cpu")
    assert by_key.model == "tiny" and by_entry.model == "model"
    pd.testing.assert_frame_equal(by_key.layers.drop(columns="model"), by_entry.layers.drop(columns="model"))


@pytest.mark.parametrize(
    ("model", "sentences", "kwargs", "error", "message"),
    [
        ("no/such/folder", SENTENCES, {}, ValueError,
         r"model 'no/such/folder' is neither a Hugging Face folder .*; allowed: a Hugging Face model folder"),
        (3, SENTENCES, {}, TypeError, r"model is a int; allowed: a Hugging Face model folder"),
        (RANDOM_BERT, [], {}, ValueError, r"sentences holds 0 sentence\(s\); allowed: an iterable of at least 2"),
        (RANDOM_BERT, "The dog runs.", {}, TypeError, r"sentences is a str; allowed: an iterable"),
        (RANDOM_BERT, ["The dog runs.", 7], {}, ValueError, r"an item that is not a string; allowed"),
        (RANDOM_BERT, ["The dog runs.", "  "], {}, ValueError, r"sentences\[1\]: empty sentence"),
        (RANDOM_BERT, SENTENCES, {"device": "tpu"}, ValueError, r"device is 'tpu'; allowed: auto, cpu, cuda"),
        (RANDOM_BERT, SENTENCES, {"config": {"words": {"min_occurrences": 1}}}, Exception, r"min_occurrences"),
        (RANDOM_BERT, SENTENCES, {"tokenizer": object()}, ValueError, r"tokenizer= goes with a model already loaded"),
    ],
)  # fmt: skip
def test_what_study_is_given_is_checked_first_in_one_sentence(model, sentences, kwargs, error, message):
    with pytest.raises(error, match=message):
        contextuality.study(model, sentences, **kwargs)


def test_a_gguf_file_is_the_path_sources_gguf_entry_and_a_loaded_model_needs_its_tokenizer(tmp_path, folder):
    from transformers import AutoModel

    (tmp_path / "tiny.Q8_0.gguf").write_bytes(b"GGUF")
    given = model_input(tmp_path / "tiny.Q8_0.gguf", {}, None, {"pooling": "last"})
    assert given.key == "tiny-Q8_0"
    assert given.entry == {"source": "path", "path": str(tmp_path), "gguf_file": "tiny.Q8_0.gguf", "pooling": "last"}
    with pytest.raises(ValueError, match=r"a model already loaded needs its tokenizer"):
        model_input(AutoModel.from_pretrained(folder), {}, None, None)


def test_import_contextuality_stays_light():
    import subprocess
    import sys

    code = "import sys, contextuality; print(sorted({'torch', 'transformers', 'pandas'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny-bert", "tiny-gpt2"])
def test_study_gives_the_pipelines_tables_on_the_smoke_corpus(smoke_run, model):
    """The smoke run's model folder and corpus, its settings: the tables of its store path, within the tolerance
    of the device path against it (tests/measure/test_device_path.py): the rows drawn on the host the same bytes."""
    from workflow_runs import assert_same_layer_table

    config = smoke_config()
    entry = config["models"][model]
    config["models"] = {model: {"source": "path", "path": str(unpacked(smoke_run / layout.path(layout.MODEL_FOLDER,
                                                                                              model=model))),
                                **{key: entry[key] for key in ("indexing", "pooling", "max_length") if key in entry}}}  # fmt: skip
    measured = contextuality.study(model, None, config=config, device="cpu", panel=True)
    layers = pd.read_parquet(smoke_run / layout.path(layout.LAYERS_PARQUET, corpus="sts", model=model))
    mine = measured.layers.merge(measured.panel, on=["model", "layer"])[list(layers.columns)]
    assert_same_layer_table(mine, layers, model)
    words = pd.read_parquet(smoke_run / layout.path(layout.WORDS, corpus="sts", model=model))
    pd.testing.assert_frame_equal(measured.words, words, check_exact=False, atol=1e-5, rtol=0)
    assert measured.losses == json.loads(
        (smoke_run / layout.path(layout.LOSSES, corpus="sts", model=model)).read_text()
    )
