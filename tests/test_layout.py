"""The results layout (contextuality.core.layout): one home for every path the rules write and later steps read."""

from __future__ import annotations

import json

import pytest

from contextuality.core import layout


def test_patterns_are_filled_with_two_digit_layers():
    assert layout.path(layout.LAYER_FILE, model="m", layer=3) == "results/embeddings/m/layers/layer_03.h5"
    assert layout.path(layout.PCS, model="m", layer=12) == "results/metrics/m/pcs/layer_12.txt"
    assert layout.path(layout.LAYER_FILE, model="m", layer=120).endswith("layer_120.h5")
    assert layout.path(layout.SHARD, model="m", shard=0) == "results/embeddings/m/shards/shard_0.h5"
    assert layout.path(layout.TABLE, name="claims", ext="md") == "results/tables/claims.md"


@pytest.mark.parametrize("target, model, layer", [
    ("results/metrics/tiny-bert/layers.csv", "tiny-bert", None),
    ("./results/metrics/tiny-bert/pcs/layer_07.txt", "tiny-bert", 7),
    ("results/metrics/m/per_layer/layer_02.words.parquet", "m", 2),
    ("results/embeddings/m/layers/layer_04.h5", "m", 4),
    ("results/figures/m/geometry.png", "m", None),
    ("results/figures/anisotropy.png", None, None),
    ("results/static/m/scores.csv", "m", None),
    ("results/static/baselines/GloVe.csv", None, None),
    ("results/metrics/nosuch/anything.txt", "nosuch", None),
    ("resources/models/m/source.json", "m", None),
    ("results/tables/summary.md", None, None),
])  # fmt: skip
def test_a_target_is_read_back_as_its_model_and_layer(target, model, layer):
    assert layout.model_of(target) == model
    assert layout.layer_of(target) == layer


def test_a_static_baselines_scores_name_its_baseline():
    assert layout.baseline_of("results/static/baselines/GloVe.csv") == "GloVe"
    assert layout.baseline_of("results/static/m/scores.csv") is None


@pytest.mark.slow
def test_every_file_of_the_smoke_run_is_a_file_of_the_layout_and_the_manifest_names_its_layer_files(smoke_run):
    workdir = smoke_run
    written = [path.relative_to(workdir).as_posix() for root in ("results", "resources/models")
               for path in (workdir / root).rglob("*") if path.is_file()]
    # the model folders' own files (weights, tokenizer) are whatever the model ships: only the folder is named
    unnamed = [name for name in written if layout.parse(name) is None and "/model/" not in name]
    assert unnamed == []
    for model in ("tiny-bert", "tiny-gpt2"):
        manifest = json.loads((workdir / layout.path(layout.MANIFEST, model=model)).read_text())
        embeddings = layout.path(layout.EMBEDDINGS, model=model)
        assert [f"{embeddings}/{name}" for name in manifest["layers"]] == [
            layout.path(layout.LAYER_FILE, model=model, layer=layer) for layer in range(manifest["n_layers"])
        ]
