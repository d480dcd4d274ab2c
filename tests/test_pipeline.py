"""End to end: the smoke config (tiny random models, 120 sentences) through the real Snakemake CLI."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import run_snakemake
from workflow_runs import smoke_config_path

pytestmark = pytest.mark.slow


def test_every_table_and_figure_exists(smoke_run):
    results = smoke_run / "results"
    for model in ("tiny-bert", "tiny-gpt2"):
        for name in ("words.parquet", "layers.parquet", "layers.csv", "context_specific_words.csv"):
            assert (results / "metrics" / "sts" / model / name).stat().st_size > 0
        assert len(list((results / "metrics" / "sts" / model / "pcs").glob("layer_*.txt"))) >= 3
    for name in ("anisotropy", "self_similarity", "intra_sentence", "mev", "table1_by_layer"):
        assert (results / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (results / "figures" / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    for name in ("summary.md", "summary.tex", "claims.md", "table1.md", "table1.tex", "table1.csv"):
        assert (results / "tables" / name).stat().st_size > 0


def test_layer_files_have_the_expected_shapes(smoke_run):
    layers = sorted((smoke_run / "results/embeddings/sts/tiny-gpt2/layers").glob("layer_*.h5"))
    assert len(layers) == 3 + 1  # 3 hidden layers + the input layer
    units = pd.read_parquet(smoke_run / "results/embeddings/sts/tiny-gpt2/units.parquet")
    words = pd.read_parquet(smoke_run / "results/corpora/sts/spacy_words.parquet")
    # word indexing: one unit per spaCy word, but for the words cut off by tiny-gpt2's max_length
    cut = json.loads((smoke_run / "results/embeddings/sts/tiny-gpt2/losses.json").read_text())["words_lost"][
        "truncated"
    ]
    assert cut > 0 and len(units) == len(words) - cut
    with h5py.File(layers[0]) as first:
        assert first["vectors"].shape == (len(units), 32)
        assert first.attrs["complete"] == 1
        assert first["sentence_offsets"][-1] == len(units)


def test_values_are_in_range(smoke_run):
    for model in ("tiny-bert", "tiny-gpt2"):
        words = pd.read_parquet(smoke_run / f"results/metrics/sts/{model}/words.parquet")
        layers = pd.read_parquet(smoke_run / f"results/metrics/sts/{model}/layers.parquet")
        assert words["self_similarity"].between(-1, 1).all()
        assert words["mev"].dropna().between(0, 1).all()
        assert layers["baseline_cosine"].between(-1, 1).all()
        assert layers["intra_sentence"].between(-1, 1).all()
        assert np.allclose(layers["adjusted_self_similarity"], layers["self_similarity"] - layers["baseline_cosine"])


def test_report_has_every_figure_and_table(smoke_run, tmp_path):
    result = run_snakemake(smoke_run, "--report", str(tmp_path / "report.html"), configfile=smoke_config_path())
    assert result.returncode == 0, result.stderr[-3000:]
    html = (tmp_path / "report.html").read_text(errors="replace")
    for name in ("anisotropy.png", "self_similarity.png", "intra_sentence.png", "mev.png", "table1.md", "claims.md"):
        assert name in html
