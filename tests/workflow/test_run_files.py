"""The run's files as the rules name them (contextuality.workflow.run_files), called directly: what `snakemake`
builds by default on the store path and on the device path, and the rules' input functions. One command-line case
(tests/test_workflow.py's dry run of the default config) proves the Snakefile's wiring."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from contextuality.core import layout
from contextuality.workflow.run_files import RunFiles, dataset_folder_files, filled, in_corpus, pair_files
from contextuality.workflow.schema import load_settings
from workflow_runs import DEVICE_SMOKE, RULES, smoke_config

LAYERS = {"tiny-bert": 3, "tiny-gpt2": 4}  # the smoke models' layers (input layer included)


def _files(**overrides) -> RunFiles:
    settings = load_settings(smoke_config(**overrides))
    return RunFiles(settings, built_record=lambda model: f"built/{model}/source.json")


@pytest.fixture(autouse=True)
def _known_layers(request, monkeypatch):
    if "built" not in request.node.name:
        monkeypatch.setattr(RunFiles, "n_layers", lambda self, model: LAYERS[model])


def _by_rule(targets) -> dict[str, list[str]]:
    rules = {}
    for target in targets:
        name, _, where = target.partition(":")
        rules.setdefault(name, []).append(where)
    return rules


def test_the_store_path_builds_every_shard_layer_file_and_layer_measurement():
    files = _files()
    rules = _by_rule(files.final(RULES))
    shards = {model: files.settings.models[model].n_shards for model in LAYERS}
    corpora = ["sts", layout.USAGES_CORPUS]  # the usages' store for the senses
    assert sorted(rules["extract"]) == sorted(f"{c}/{m}/{s}" for c in corpora for m in LAYERS for s in range(shards[m]))
    assert sorted(rules["layer_file"]) == sorted(f"{c}/{m}/{layer:02d}" for c in corpora for m, n in LAYERS.items()
                                                 for layer in range(n))  # fmt: skip
    assert sorted(rules["measure_layer"]) == sorted(
        f"sts/{m}/{layer:02d}" for m, n in LAYERS.items() for layer in range(n)
    )
    assert "device_layer" not in rules and "measure_model" not in rules
    assert sorted(rules["combine_layers"]) == ["sts/tiny-bert", "sts/tiny-gpt2"]  # measured corpus only
    assert rules["measure_senses"] == ["sts/tiny-bert", "sts/tiny-gpt2"]
    pairs = [target for target in files.final(RULES) if "similarity" in target and "__" in target]
    assert pairs == [layout.path(layout.SIMILARITY_PAIR, corpus="sts", model_a="tiny-bert", model_b="tiny-gpt2")]


def test_the_device_path_builds_the_parts_and_each_layer_from_its_part_and_no_store():
    files = _files(**DEVICE_SMOKE)
    rules = _by_rule(files.final(RULES))
    parts = files.settings.metrics.device.device_parts
    assert sorted(rules["measure_model"]) == sorted(f"sts/{m}/{p}" for m in LAYERS for p in range(parts))
    assert sorted(rules["device_layer"]) == sorted(
        f"sts/{m}/{layer:02d}" for m, n in LAYERS.items() for layer in range(n)
    )
    assert not {"measure_layer", "extract", "layer_file", "manifest"} & set(rules)
    assert files.per_layer_rule(RULES) is RULES.device_layer and files.per_layer_order() == (
        "device_layer",
        "measure_layer",
    )
    assert _files().per_layer_order() == ("measure_layer", "device_layer")


def test_an_unbuilt_models_layers_are_left_to_its_build(monkeypatch):
    from snakemake.exceptions import IncompleteCheckpointException

    def unbuilt(self, model):
        raise IncompleteCheckpointException(None, None)

    monkeypatch.setattr(RunFiles, "n_layers", unbuilt)
    files = _files()
    rules = _by_rule(files.corpus_model(RULES, "sts", "tiny-gpt2", measured=True))
    assert set(rules) == {"plan", "manifest", "combine_layers"} and files.stored_layers("tiny-gpt2") is None


def test_senses_static_and_similarity_off_leave_their_files_out():
    files = _files(senses={"enabled": False}, static={"enabled": False}, similarity={"enabled": False})
    rules = _by_rule(files.final(RULES))
    assert not {"wordnet", "measure_senses", "table1", "static_scores", "similarity_rows", "atlas"} & set(rules)
    assert all(not where.startswith(layout.USAGES_CORPUS) for where in rules["plan"])


def test_a_models_layers_come_from_its_built_record(monkeypatch):
    files = _files()
    asked = []
    source = type(
        "Source", (), {"layers_in_config": False, "layer_count": lambda self, build, record: asked.append(record) or 7}
    )
    monkeypatch.setattr(
        "contextuality.workflow.run_files.SOURCES", {files.settings.models["tiny-gpt2"].source: source()}
    )
    assert files.n_layers("tiny-gpt2") == 7 and asked == ["built/tiny-gpt2/source.json"]


def test_the_input_functions_name_every_shard_and_layer_of_the_wildcards_model():
    files = _files()
    wildcards = SimpleNamespace(corpus="sts", model="tiny-gpt2")
    assert files.expand_shards(layout.SHARD)(wildcards) == [
        layout.path(layout.SHARD, corpus="sts", model="tiny-gpt2", shard=shard) for shard in range(4)
    ]
    assert files.every_layer(layout.LAYER_FILE, corpus="usages")(wildcards) == [
        layout.path(layout.LAYER_FILE, corpus="usages", model="tiny-gpt2", layer=layer) for layer in range(4)
    ]
    store = files.store_files()
    assert len(store) == sum(shards + 1 + LAYERS[model] for model, shards in (("tiny-bert", 1), ("tiny-gpt2", 4)))
    assert files.measured_on(wildcards) == [layout.path(layout.MANIFEST, corpus="sts", model="tiny-gpt2")]
    assert files.device_made_from(wildcards) == [] and files.store_manifest_beside_device(wildcards) == []
    assert set(files.similarity_sample_inputs(wildcards)) == {"layers", "shards", "manifest"}
    assert set(files.store_sense_inputs()) == {"layers", "shards", "manifest", "senses_layers", "senses_shards",
                                               "senses_manifest"}  # fmt: skip
    assert files.usage_source_inputs() == {}


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_each_layer_is_taken_from_the_part_that_measures_it(parts):
    from contextuality.measure.device.parts import part_layers

    files = _files(metrics={"on_device": True, "device": "cpu", "device_parts": parts}, extraction={"store": False})
    for layer in range(LAYERS["tiny-gpt2"]):
        wildcards = SimpleNamespace(corpus="sts", model="tiny-gpt2", layer=f"{layer:02d}")
        part = next(p for p in range(parts) if layer in part_layers(LAYERS["tiny-gpt2"], parts, p))
        assert files.device_part_of_layer(wildcards) == layout.path(
            layout.DEVICE_PART, corpus="sts", model="tiny-gpt2", part=part
        )
    wildcards = SimpleNamespace(corpus="sts", model="tiny-gpt2")
    records = files.measured_on(wildcards)
    assert records == [layout.path(layout.DEVICE_RECORD, corpus="sts", model="tiny-gpt2", part=p) for p in range(parts)]
    assert files.similarity_sample_inputs(wildcards) == {
        "parts": [layout.path(layout.DEVICE_SAMPLE, corpus="sts", model="tiny-gpt2", part=p) for p in range(parts)]
    }
    assert len(files.device_made_from(wildcards)) == 3 and files.store_sense_inputs() == {}


def test_the_corpus_inputs_of_a_bundled_sts_corpus_and_a_dataset_folder(tmp_path):
    files = _files()
    inputs = files.corpus_inputs(SimpleNamespace(corpus="sts"))
    assert inputs["pairs"] == layout.path(layout.STS_PAIRS, corpus="sts") and inputs["release_files"]
    assert inputs["release_files"] == files.sts_release_inputs(SimpleNamespace(corpus="sts"))["release_files"]
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "a.txt").write_text("a")
    folder = SimpleNamespace(source="datasets", path=tmp_path)
    assert [name.rsplit("/", 1)[1] for name in dataset_folder_files(folder)] == ["a.txt", "b.txt"]
    assert dataset_folder_files(SimpleNamespace(source="text", path=tmp_path)) == []


def test_filled_keeps_a_storage_objects_wildcards_and_formats_a_plain_pattern():
    class Output(str):
        def apply_wildcards(self, wildcards):
            return ("applied", dict(wildcards))

    assert filled([Output("x")], model=["a", "b"]) == [("applied", {"model": "a"}), ("applied", {"model": "b"})]
    assert filled(["{corpus}/{layer}"], corpus=["sts"], layer=[1, 2]) == ["sts/1", "sts/2"]
    assert in_corpus(layout.MANIFEST, "usages") == layout.MANIFEST.replace("{corpus}", "usages")
    pair = SimpleNamespace(corpus="sts", model_a="a", model_b="b")
    assert pair_files(layout.WORDS, pair) == [layout.path(layout.WORDS, corpus="sts", model=m) for m in "ab"]


def test_a_layer_is_in_exactly_one_part_of_consecutive_layers():
    from contextuality.measure.device.parts import part_layers, part_of_layer

    for layers, parts in ((13, 2), (4, 3), (25, 4), (3, 3)):
        split = [part_layers(layers, parts, part) for part in range(parts)]
        assert sum(split, []) == list(range(layers))
        assert [part_of_layer(layer, layers, parts) for layer in range(layers)] == [
            part for part, held in enumerate(split) for _ in held
        ]
