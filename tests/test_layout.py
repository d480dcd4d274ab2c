"""The results layout (contextuality.core.layout): one home for every path the rules write and later steps read."""

from __future__ import annotations

import json
import re

import pytest

from conftest import PROJECT
from contextuality.core import layout


def test_patterns_are_filled_with_two_digit_layers():
    assert (
        layout.path(layout.LAYER_FILE, corpus="sts", model="m", layer=3)
        == "results/embeddings/sts/m/layers/layer_03.h5"
    )
    assert layout.path(layout.PCS, corpus="sts", model="m", layer=12) == "results/metrics/sts/m/pcs/layer_12.txt"
    assert layout.path(layout.LAYER_FILE, corpus="sts", model="m", layer=120).endswith("layer_120.h5")
    assert layout.path(layout.SHARD, corpus="sts", model="m", shard=0) == "results/embeddings/sts/m/shards/shard_0.h5"
    assert layout.path(layout.TABLE, name="claims", ext="md") == "results/tables/claims.md"


@pytest.mark.parametrize("target, model, layer", [
    ("results/metrics/sts/tiny-bert/layers.csv", "tiny-bert", None),
    ("./results/metrics/sts/tiny-bert/pcs/layer_07.txt", "tiny-bert", 7),
    ("results/metrics/sts/m/per_layer/layer_02.words.parquet", "m", 2),
    ("results/embeddings/sts/m/layers/layer_04.h5", "m", 4),
    ("results/figures/m/geometry.png", "m", None),
    ("results/figures/anisotropy.png", None, None),
    ("results/static/m/scores.csv", "m", None),
    ("results/static/baselines/GloVe.csv", None, None),
    ("results/metrics/sts/nosuch/anything.txt", "nosuch", None),
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
    written = [
        path.relative_to(workdir).as_posix()
        for root in ("results", "resources/models")
        for path in (workdir / root).rglob("*")
        if path.is_file()
    ]
    # the model folders' own files (weights, tokenizer) are whatever the model ships: only the folder is named
    unnamed = [name for name in written if layout.parse(name) is None and "/model/" not in name]
    assert unnamed == []
    for model in ("tiny-bert", "tiny-gpt2"):
        manifest = json.loads((workdir / layout.path(layout.MANIFEST, corpus="sts", model=model)).read_text())
        embeddings = layout.path(layout.EMBEDDINGS, corpus="sts", model=model)
        assert [f"{embeddings}/{name}" for name in manifest["layers"]] == [
            layout.path(layout.LAYER_FILE, corpus="sts", model=model, layer=layer)
            for layer in range(manifest["n_layers"])
        ]


def _rules_and_logs() -> dict[str, str]:
    """Every rule (and checkpoint) of workflow/rules/ with what its ``log:`` says, read from the rule files."""
    logs = {}
    for path in sorted((PROJECT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=\s*(?:rule|checkpoint) \w+:)", path.read_text()):
            head = re.match(r"\s*(?:rule|checkpoint) (\w+):", block)
            if head:
                log = re.search(r"\n\s+log:\n\s+(\S+?),?\n", block)
                logs[head.group(1)] = log.group(1) if log else ""
    return logs


def test_every_rule_logs_to_a_pattern_of_the_layout_named_for_its_rule():
    logs = _rules_and_logs()
    assert {"plan", "extract", "manifest", "layer_file", "measure_senses"} <= set(logs)
    for rule, log in logs.items():
        if rule in ("all", "store"):  # targets: no job of their own
            continue
        assert log.startswith("layout.") and log.endswith("_LOG"), (rule, log)
        pattern = getattr(layout, log.removeprefix("layout."))
        assert pattern.startswith(f"{layout.LOGS}/{rule}/") or pattern == f"{layout.LOGS}/{rule}.log", (rule, pattern)


def test_one_chain_over_every_corpus_no_copy_of_it_per_corpus():
    """The usages' corpus goes through the rules every corpus goes through: no rule copied with other paths, and
    no pattern of the layout is a second corpus's copy of another."""
    for path in (PROJECT / "workflow" / "rules").glob("*.smk"):
        assert not re.search(r"^use rule", path.read_text(), flags=re.M), path
    assert not [name for name in layout.PATTERNS if name.startswith("SENSES_") and not name.endswith("_LOG")]
    for name in ("SENTENCES", "WORD_INDEX", "TOKENS", "SHARD", "MANIFEST", "LAYER_FILE", "LAYER_RECORD", "LAYERS_CSV"):
        assert "{corpus}" in getattr(layout, name), name


def test_a_corpus_and_a_model_are_read_back_from_their_paths():
    assert layout.path(layout.LAYERS_CSV, corpus="glosses", model="m") == "results/metrics/glosses/m/layers.csv"
    assert layout.corpus_of("results/embeddings/usages/m/layers/layer_01.h5") == "usages"
    assert layout.model_of("results/embeddings/usages/m/layers/layer_01.h5") == "m"
    assert layout.corpus_of("results/corpora/glosses/word_index.parquet") == "glosses"
    assert layout.corpus_of("results/tables/summary.md") is None
    # materialise_model's benchmarks sit beside the corpora's folders in results/benchmarks/
    assert layout.reserved_corpus_names() == {
        "usages": "results/corpora/usages/",
        "materialise_model": "results/benchmarks/materialise_model/",
    }
