"""contextuality.workflow.migrate: a results folder of the layout before the corpus level, moved into it."""

from __future__ import annotations

import pytest

from contextuality.core import layout
from contextuality.workflow.migrate import main

OLD = [
    "corpus/sentences.parquet",
    "corpus/corpus.json",
    "corpus/sts_pairs.jsonl",
    "corpus/wordnet_glosses.parquet",
    "embeddings/m/shards/shard_0.h5",
    "embeddings/m/layers/layer_00.h5",
    "embeddings/m/manifest.json",
    "metrics/m/layers.csv",
    "metrics/m/senses/layers.csv",
    "senses/corpus/word_index.parquet",
    "senses/embeddings/m/manifest.json",
    "senses/inventory.parquet",
    "benchmarks/m/extract_shard_0.tsv",
    "benchmarks/m/senses_extract_shard_0.tsv",
    "benchmarks/m/senses_plan.tsv",
    "benchmarks/corpus.tsv",
    "metrics/m/per_layer/layer_00.json",
    "metrics/m/pcs/layer_00.txt",
    "static/m/scores.csv",
    "tables/summary.md",
    "tables/claims.md",
    "figures/m/geometry.png",
    "export/m/embeddings.hdf5",
]
NEW = {
    "corpora/sts/sentences.parquet": layout.path(layout.SENTENCES, corpus="sts"),
    "corpora/sts/corpus.json": layout.path(layout.CORPUS_RECORD, corpus="sts"),
    "corpora/sts/sts_pairs.jsonl": layout.path(layout.STS_PAIRS, corpus="sts"),
    "corpus/wordnet_glosses.parquet": layout.WORDNET_GLOSSES,
    "embeddings/sts/m/shards/shard_0.h5": layout.path(layout.SHARD, corpus="sts", model="m", shard=0),
    "embeddings/sts/m/layers/layer_00.h5": layout.path(layout.LAYER_FILE, corpus="sts", model="m", layer=0),
    "embeddings/sts/m/manifest.json": layout.path(layout.MANIFEST, corpus="sts", model="m"),
    "metrics/sts/m/per_layer/layer_00.json": layout.path(layout.LAYER_RECORD, corpus="sts", model="m", layer=0),
    "metrics/sts/m/pcs/layer_00.txt": layout.path(layout.PCS, corpus="sts", model="m", layer=0),
    "corpora/usages/word_index.parquet": layout.path(layout.WORD_INDEX, corpus="usages"),
    "embeddings/usages/m/manifest.json": layout.path(layout.MANIFEST, corpus="usages", model="m"),
    "senses/inventory.parquet": layout.SENSE_INVENTORY,
    "benchmarks/sts/m/extract_shard_0.tsv": layout.path(layout.EXTRACT_BENCHMARK, corpus="sts", model="m", shard=0),
    "benchmarks/usages/m/extract_shard_0.tsv": layout.path(
        layout.EXTRACT_BENCHMARK, corpus="usages", model="m", shard=0
    ),
    "benchmarks/usages/m/plan.tsv": layout.path(layout.PLAN_BENCHMARK, corpus="usages", model="m"),
    "benchmarks/sts/corpus.tsv": layout.path(layout.CORPUS_BENCHMARK, corpus="sts"),
}
# what the new code writes differently: set aside, to be rebuilt by the next run
SET_ASIDE = [
    "pre-migration/metrics/m/layers.csv",
    "pre-migration/metrics/m/senses/layers.csv",
    "pre-migration/static/m/scores.csv",
    "pre-migration/tables/summary.md",
    "pre-migration/tables/claims.md",
    "pre-migration/figures/m/geometry.png",
    "pre-migration/export/m/embeddings.hdf5",
]


def _tree(results, names):
    for name in names:
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(name)


def _files(results):
    return sorted(path.relative_to(results).as_posix() for path in results.rglob("*") if path.is_file())


def test_the_old_layout_is_moved_into_the_corpus_level_each_file_where_the_layout_names_it(tmp_path):
    results = tmp_path / "results"
    _tree(results, OLD)
    main(["--results", str(results)])
    assert _files(results) == sorted([*NEW, *SET_ASIDE])
    assert all(f"results/{name}" == where for name, where in NEW.items())
    assert not (results / "senses" / "corpus").exists() and not (results / "benchmarks" / "m").exists()


def test_after_a_migration_only_stored_vectors_and_per_layer_measures_are_left_for_snakemake_touch(tmp_path):
    """The old code's tables, figures and combined measures must not be touched as current: new code remakes them."""
    results = tmp_path / "results"
    _tree(results, OLD)
    main(["--results", str(results)])
    derived = ("tables", "figures", "static", "export")
    assert not any((results / folder).exists() for folder in derived)
    assert not (results / "metrics/sts/m/layers.csv").exists() and not (results / "metrics/sts/m/senses").exists()
    aside = results / "pre-migration"
    assert (aside / "tables/summary.md").read_text() == "tables/summary.md"  # set aside unchanged, not deleted


def test_a_second_migration_moves_nothing_not_even_a_second_corpus(tmp_path, capsys):
    """A second migration moves nothing: a tree with a second corpus (and the new code's own tables) stays as it is."""
    results = tmp_path / "results"
    _tree(results, OLD)
    main(["--results", str(results)])
    second = ["corpora/wiki/sentences.parquet", "embeddings/wiki/m/manifest.json", "metrics/wiki/m/layers.csv"]
    _tree(results, [*second, "benchmarks/wiki/m/plan.tsv", "benchmarks/wiki/corpus.tsv", "tables/summary.md"])
    before = _files(results)
    main(["--results", str(results)])
    assert _files(results) == before
    assert "nothing to move" in capsys.readouterr().out


def test_a_file_held_by_both_layouts_stops_the_migration_before_any_move(tmp_path):
    results = tmp_path / "results"
    _tree(results, [*OLD, "corpora/sts/sentences.parquet"])
    with pytest.raises(SystemExit, match=r"corpora/sts/sentences.parquet already there \(the old layout and the new"):
        main(["--results", str(results)])
    assert _files(results) == sorted([*OLD, "corpora/sts/sentences.parquet"])


def test_a_taken_place_stops_the_migration_before_any_move(tmp_path):
    results = tmp_path / "results"
    for name in ("embeddings/m/manifest.json", "embeddings/sts/m/manifest.json"):
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(name)
    (results / "metrics/m").mkdir(parents=True)
    with pytest.raises(SystemExit, match="already there"):
        main(["--results", str(results)])
    assert (results / "metrics/m").is_dir()
