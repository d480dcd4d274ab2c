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
    "static/m/scores.csv",
    "tables/summary.md",
]
NEW = {
    "corpora/sts/sentences.parquet": layout.path(layout.SENTENCES, corpus="sts"),
    "corpora/sts/corpus.json": layout.path(layout.CORPUS_RECORD, corpus="sts"),
    "corpora/sts/sts_pairs.jsonl": layout.path(layout.STS_PAIRS, corpus="sts"),
    "corpus/wordnet_glosses.parquet": layout.WORDNET_GLOSSES,
    "embeddings/sts/m/shards/shard_0.h5": layout.path(layout.SHARD, corpus="sts", model="m", shard=0),
    "embeddings/sts/m/layers/layer_00.h5": layout.path(layout.LAYER_FILE, corpus="sts", model="m", layer=0),
    "embeddings/sts/m/manifest.json": layout.path(layout.MANIFEST, corpus="sts", model="m"),
    "metrics/sts/m/layers.csv": layout.path(layout.LAYERS_CSV, corpus="sts", model="m"),
    "metrics/sts/m/senses/layers.csv": layout.path(layout.SENSE_LAYERS, corpus="sts", model="m"),
    "corpora/usages/word_index.parquet": layout.path(layout.WORD_INDEX, corpus="usages"),
    "embeddings/usages/m/manifest.json": layout.path(layout.MANIFEST, corpus="usages", model="m"),
    "senses/inventory.parquet": layout.SENSE_INVENTORY,
    "benchmarks/sts/m/extract_shard_0.tsv": layout.path(layout.EXTRACT_BENCHMARK, corpus="sts", model="m", shard=0),
    "benchmarks/usages/m/extract_shard_0.tsv": layout.path(
        layout.EXTRACT_BENCHMARK, corpus="usages", model="m", shard=0
    ),
    "benchmarks/usages/m/plan.tsv": layout.path(layout.PLAN_BENCHMARK, corpus="usages", model="m"),
    "benchmarks/sts/corpus.tsv": layout.path(layout.CORPUS_BENCHMARK, corpus="sts"),
    "static/m/scores.csv": layout.path(layout.STATIC_SCORES, model="m"),
    "tables/summary.md": layout.path(layout.TABLE, name="summary", ext="md"),
}


def test_the_old_layout_is_moved_into_the_corpus_level_each_file_where_the_layout_names_it(tmp_path):
    results = tmp_path / "results"
    for name in OLD:
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(name)
    main(["--results", str(results)])
    moved = sorted(path.relative_to(results).as_posix() for path in results.rglob("*") if path.is_file())
    assert moved == sorted(NEW)
    assert all(f"results/{name}" == where for name, where in NEW.items())
    assert not (results / "senses" / "corpus").exists() and not (results / "benchmarks" / "m").exists()


def test_a_taken_place_stops_the_migration_before_any_move(tmp_path):
    results = tmp_path / "results"
    for name in ("embeddings/m/manifest.json", "embeddings/sts/m/manifest.json"):
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(name)
    (results / "metrics/m").mkdir(parents=True)
    with pytest.raises(SystemExit, match="already there"):
        main(["--results", str(results)])
    assert (results / "metrics/m").is_dir()
