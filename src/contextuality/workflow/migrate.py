"""Move a results folder of the layout before the corpus level (issue 37) into it, without recomputing anything.

    python -m contextuality.workflow.migrate [--results results] [--corpus sts] [--dry-run]

Before, the study's corpus had results/corpus/, results/embeddings/{model}/, results/metrics/{model}/ and the
WordNet usages results/senses/corpus/ and results/senses/embeddings/{model}/. Now every corpus has its own level
(contextuality.core.layout): results/corpora/{corpus}/, results/embeddings/{corpus}/{model}/, ... Each folder is
moved whole (a layer file names its shards relative to itself, and a manifest its files relative to the model's
embeddings folder, so the store reads as before). ``--corpus``: the study's corpus's name (``corpus.name``; 'sts'
for the STS sources, 'corpus' for any other). Logs are left where they are.

Snakemake's records of the moved files stay behind, and the records of what read them name the old paths: then
``snakemake --touch --cores 1`` (with the run's --configfile) records the moved files as up to date, and the next
run does nothing (measured on the smoke run's results: 45 moves, then nothing to be done).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from contextuality.core import layout

CORPUS_FILES = ("sentences.parquet", "corpus.json", "spacy_words.parquet", "word_index.parquet", "sts_pairs.jsonl")
# the usages' benchmark files of a model, by their name in the old layout
USAGES_BENCHMARKS = {"senses_plan.tsv": "plan.tsv", "senses_manifest.tsv": "manifest.tsv"}


def _model_folders(folder: Path, corpora: set[str]) -> list[Path]:
    """The old layout's model folders in ``folder``: every child folder that is no corpus's."""
    return (
        sorted(path for path in folder.iterdir() if path.is_dir() and path.name not in corpora)
        if folder.is_dir()
        else []
    )


def moves(results: Path, corpus: str) -> list[tuple[Path, Path]]:
    """(from, to) of every file or folder of the old layout under ``results``, in the order to move them."""
    usages, planned = layout.USAGES_CORPUS, []
    corpora = {corpus, usages}
    old, new = results / "corpus", results / "corpora"
    planned += [(old / name, new / corpus / name) for name in CORPUS_FILES]
    planned += [
        (results / "senses" / "corpus" / path.name, new / usages / path.name)
        for path in sorted((results / "senses" / "corpus").glob("*"))
    ]
    for kind in ("embeddings", "metrics", "export"):
        planned += [(path, results / kind / corpus / path.name) for path in _model_folders(results / kind, corpora)]
    planned += [
        (path, results / "embeddings" / usages / path.name)
        for path in _model_folders(results / "senses" / "embeddings", set())
    ]
    planned += _benchmark_moves(results / "benchmarks", corpus)
    return [(source, target) for source, target in planned if source.exists()]


def _benchmark_moves(benchmarks: Path, corpus: str) -> list[tuple[Path, Path]]:
    planned = [(benchmarks / name, benchmarks / corpus / name) for name in ("corpus.tsv", "words.tsv")]
    for folder in _model_folders(benchmarks, {corpus, layout.USAGES_CORPUS}):
        for path in sorted(folder.glob("*.tsv")):
            if path.name.startswith("senses_extract_shard_"):
                name = path.name.removeprefix("senses_")
            else:
                name = USAGES_BENCHMARKS.get(path.name)
            target_corpus = layout.USAGES_CORPUS if name else corpus
            planned.append((path, benchmarks / target_corpus / folder.name / (name or path.name)))
    return planned


def migrate(results: Path, corpus: str, dry_run: bool = False) -> list[tuple[Path, Path]]:
    """Move every file or folder of the old layout; refuse (before any move) one whose new place is taken."""
    planned = moves(results, corpus)
    taken = [str(target) for _, target in planned if target.exists()]
    if taken:
        raise SystemExit(f"not migrated: already there: {', '.join(taken)}; move or remove them first")
    for source, target in planned:
        print(f"{source} -> {target}")
        if not dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
    for folder in (results / "corpus", results / "senses" / "corpus", results / "senses" / "embeddings"):
        if not dry_run and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if not dry_run:  # model folders of benchmarks emptied of their files
        for folder in _model_folders(results / "benchmarks", {corpus, layout.USAGES_CORPUS}):
            if not any(folder.iterdir()):
                folder.rmdir()
    return planned


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--results", type=Path, default=Path(layout.RESULTS), help="the results folder (default: results)"
    )
    parser.add_argument("--corpus", default="sts", help="the study's corpus's name (corpus.name; default: sts)")
    parser.add_argument("--dry-run", action="store_true", help="print the moves, move nothing")
    args = parser.parse_args(argv)
    planned = migrate(args.results, args.corpus, args.dry_run)
    if args.dry_run:
        print(f"{len(planned)} to move")
    else:
        print(f"{len(planned)} moved; now `snakemake --touch --cores 1` (with the run's --configfile) records them")


if __name__ == "__main__":
    main()
