"""Guarantee: the same config and seed give byte-identical metric tables on CPU; the batch size changes
stored vectors and metric means by at most 1e-4 (float32)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import (
    PROJECT,
    STS_DIR,
    extract_planned,
    gather_layers,
    measure_model,
    measure_settings,
    random_model_on,
    run_command,
)
from contextuality.corpus.sts import read_release, release_files
from contextuality.extraction.plan import build_occurrences
from contextuality.store.files import open_complete
from workflow_runs import KILLED_MODEL


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.mark.slow
def test_two_runs_with_the_same_seed_give_byte_identical_metric_tables(smoke_run, interrupted_smoke_run):
    """Two whole runs in separate directories (the second one even killed mid-shard and resumed)."""
    first = smoke_run / "results" / "metrics" / "sts" / KILLED_MODEL
    second = interrupted_smoke_run["workdir"] / "results" / "metrics" / "sts" / KILLED_MODEL
    # the report's page of the tables (layers.html) is the whole run's: the interrupted run asked for the tables
    want = {name: digest for name, digest in _digests(first).items() if not name.endswith(".html")}
    assert {"layers.csv", "layers.parquet", "words.parquet", "context_specific_words.csv"} <= set(want)
    assert any(name.startswith("pcs/") for name in want)
    assert _digests(second) == want


# --------------------------------------------------------------------------------------------------
# Smoke models

MATERIALISE = """
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[3])
from conftest import materialise

sentences, out = Path(sys.argv[1]), Path(sys.argv[2])
for architecture in ("bert", "gpt2"):
    spec = {"source": "random", "architecture": architecture, "n_hidden_layers": 2, "hidden_size": 32, "vocab_size": 400}
    materialise(architecture, spec, out / architecture, sentences_parquet=sentences, seed=7)
"""


def test_two_materialisations_of_a_random_model_give_byte_identical_tokenizer_and_weights(tmp_path):
    """Each run builds its smoke models anew. In separate processes (Python's and Rust's hash seeds differ;
    the ``tokenizers`` trainers broke ties between equally frequent pairs in hash order) the same seed and
    corpus give the same files, byte for byte."""
    pairs, _ = read_release(release_files(STS_DIR, 2014, "test", "images"))
    texts = [text for pair in pairs[:60] for text in (pair["sentence1"], pair["sentence2"])]
    pd.DataFrame({"sentence_id": range(len(texts)), "text": texts}).to_parquet(tmp_path / "sentences.parquet")
    path = os.pathsep.join(filter(None, [str(PROJECT / "src"), os.environ.get("PYTHONPATH")]))
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": hash_seed}
        command = [
            sys.executable,
            "-c",
            MATERIALISE,
            str(tmp_path / "sentences.parquet"),
            str(tmp_path / hash_seed),
            str(PROJECT / "tests"),
        ]
        result = run_command(command, env=env, timeout=600, watch=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    first, second = _digests(tmp_path / "1"), _digests(tmp_path / "2")
    # tokenizer.json holds the vocabulary (and the merges); transformers 5 writes no vocab.txt/merges.txt
    assert {
        f"{architecture}/model/{name}"
        for architecture in ("bert", "gpt2")
        for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors")
    } <= set(first)
    assert second == first


# --------------------------------------------------------------------------------------------------
# Batch size

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A dog sleeps.",
    "The cat and the dog play in the garden all afternoon long.",
    "Dogs and cats.",
    "The garden is quiet; the dog sleeps and the cat watches the birds.",
    "A bird sings.",
    "The fox runs away from the dog.",
    "Cats sleep in the sun and dogs sleep in the shade.",
] * 4


@pytest.fixture(scope="module")
def two_batch_sizes(tmp_path_factory):
    """The same model and sentences extracted and measured with batch size 1 and 8."""
    root = tmp_path_factory.mktemp("batch")
    sentences, words, index, loaded = random_model_on(TEXTS, root, "gpt2", vocab_size=200)
    runs = {}
    for batch_size in (1, 8):
        out = root / f"batch{batch_size}"
        out.mkdir()
        extract_planned(loaded, sentences, words, out, indexing="word", pooling="mean", batch_size=batch_size)
        layers = gather_layers([out / "shard.h5"], out / "units.parquet", out / "gathered")
        units = pd.read_parquet(out / "units.parquet")
        occurrences = build_occurrences(units, index, "word", 2, "occurrences", sentences)
        settings = measure_settings(seed=3, intra_sentences="all", baseline_samples=20, bootstrap_resamples=0)
        measure_model(
            layers,
            occurrences,
            out / "words.parquet",
            out / "layers.parquet",
            out / "pcs",
            out / "context.csv",
            settings,
            model="m",
            top_k=20,
        )
        runs[batch_size] = (out, layers)
    return runs


def test_batch_size_changes_stored_vectors_by_at_most_1e_4(two_batch_sizes):
    (_, one), (_, eight) = two_batch_sizes[1], two_batch_sizes[8]
    for layer, path in one.items():
        with open_complete(path) as a, open_complete(eight[layer]) as b:
            np.testing.assert_array_equal(a["sentence_offsets"][:], b["sentence_offsets"][:])
            assert np.abs(a["vectors"][:] - b["vectors"][:]).max() <= 1e-4


def test_batch_size_changes_metric_means_by_at_most_1e_4(two_batch_sizes):
    one = pd.read_parquet(two_batch_sizes[1][0] / "layers.parquet")
    eight = pd.read_parquet(two_batch_sizes[8][0] / "layers.parquet")
    columns = ["self_similarity", "intra_sentence", "mev", "baseline_cosine", "adjusted_self_similarity", "norm_mean"]
    assert len(one) == 3
    diff = (one[columns] - eight[columns]).abs().max()
    assert diff.max() <= 1e-4, diff
