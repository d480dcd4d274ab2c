"""Move a results folder of the layout before the corpus level (``results/<kind>/{model}/``) into it, without
recomputing anything.

    python -m contextuality.workflow.migrate [--results results] [--corpus sts] [--dry-run]

Before, the study's corpus had results/corpus/, results/embeddings/{model}/, results/metrics/{model}/ and the
WordNet usages results/senses/corpus/ and results/senses/embeddings/{model}/. Now every corpus has its own level
(contextuality.core.layout): results/corpora/{corpus}/, results/embeddings/{corpus}/{model}/, ... Each folder is
moved whole (a layer file names its shards relative to itself, and a manifest its files relative to the model's
embeddings folder, so the store reads as before). ``--corpus``: the study's corpus's name (``corpus.name``; 'sts'
for the STS sources, 'corpus' for any other). Logs are left where they are.

Only what the new code reads as the old code wrote it is kept: the corpora, the stored vectors, the per-layer
measures (``per_layer/``, ``pcs/``, a device path's parts), the senses' inputs and the benchmarks. Everything
derived from them that the new code writes differently (tables, figures, the combined measures, the senses'
measures, the static scores, the classic export, the similarity stage) is set aside, unchanged, under
``results/pre-migration/`` (``SET_ASIDE``): ``snakemake --touch --cores 1`` (with the run's --configfile) then
records the kept files as up to date, and the next run rebuilds what was set aside from them.

A tree of the new layout is left as it is: a folder named like a corpus of ``results/corpora/`` is that corpus's,
never an old model folder, so a second run moves nothing. A file held by both layouts stops the migration before
any move.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from contextuality.core import layout

CORPUS_FILES = ("sentences.parquet", "corpus.json", "spacy_words.parquet", "word_index.parquet", "sts_pairs.jsonl")
# the usages' benchmark files of a model, by their name in the old layout
USAGES_BENCHMARKS = {"senses_plan.tsv": "plan.tsv", "senses_manifest.tsv": "manifest.tsv"}
# where what the new code writes differently is set aside, and what is set aside: whole folders of results/, and
# in a model's metrics folder all but the per-layer measures
SET_ASIDE = "pre-migration"
DERIVED_FOLDERS = ("tables", "figures", "static", "export", "similarity")
KEPT_METRICS = ("per_layer", "pcs", "device")


def _model_folders(folder: Path, corpora: set[str]) -> list[Path]:
    """The old layout's model folders in ``folder``: every child folder that is no corpus's."""
    return (
        sorted(path for path in folder.iterdir() if path.is_dir() and path.name not in corpora)
        if folder.is_dir()
        else []
    )


def new_corpora(results: Path, corpus: str) -> set[str]:
    """The corpus folders of the new layout: the study's, the usages' and every one in ``results/corpora/``."""
    named = results / "corpora"
    return {corpus, layout.USAGES_CORPUS} | ({path.name for path in named.iterdir()} if named.is_dir() else set())


def moves(results: Path, corpus: str) -> list[tuple[Path, Path]]:
    """(from, to) of every file or folder of the old layout under ``results``, in the order to move them."""
    usages, planned = layout.USAGES_CORPUS, []
    corpora = new_corpora(results, corpus)
    old, new = results / "corpus", results / "corpora"
    planned += [(old / name, new / corpus / name) for name in CORPUS_FILES]
    planned += [
        (results / "senses" / "corpus" / path.name, new / usages / path.name)
        for path in sorted((results / "senses" / "corpus").glob("*"))
    ]
    for kind in ("embeddings", "metrics"):
        planned += [(path, results / kind / corpus / path.name) for path in _model_folders(results / kind, corpora)]
    planned += [
        (path, results / "embeddings" / usages / path.name)
        for path in _model_folders(results / "senses" / "embeddings", set())
    ]
    planned += _benchmark_moves(results / "benchmarks", corpus, corpora)
    return [(source, target) for source, target in planned if source.exists()]


def set_aside(results: Path, corpus: str) -> list[tuple[Path, Path]]:
    """(from, to) of every derived file or folder of the old layout, into ``results/pre-migration/``."""
    aside, corpora = results / SET_ASIDE, new_corpora(results, corpus)
    planned = [(results / name, aside / name) for name in DERIVED_FOLDERS if (results / name).exists()]
    for folder in _model_folders(results / "metrics", corpora):
        planned += [
            (path, aside / path.relative_to(results))
            for path in sorted(folder.iterdir())
            if path.name not in KEPT_METRICS
        ]
    return planned


def _benchmark_moves(benchmarks: Path, corpus: str, corpora: set[str]) -> list[tuple[Path, Path]]:
    planned = [(benchmarks / name, benchmarks / corpus / name) for name in ("corpus.tsv", "words.tsv")]
    for folder in _model_folders(benchmarks, corpora):
        for path in sorted(folder.glob("*.tsv")):
            if path.name.startswith("senses_extract_shard_"):
                name = path.name.removeprefix("senses_")
            else:
                name = USAGES_BENCHMARKS.get(path.name)
            target_corpus = layout.USAGES_CORPUS if name else corpus
            planned.append((path, benchmarks / target_corpus / folder.name / (name or path.name)))
    return planned


def migrate(results: Path, corpus: str, dry_run: bool = False) -> list[tuple[Path, Path]]:
    """Set aside what is derived and move the rest of the old layout; refuse (before any move) a taken place.

    A tree without a file of the old layout is left as it is (nothing set aside: the new code's own files)."""
    planned = moves(results, corpus)
    planned = set_aside(results, corpus) + planned if planned else []
    taken = [str(target) for _, target in planned if target.exists()]
    if taken:
        raise SystemExit(
            f"not migrated: {', '.join(taken)} already there (the old layout and the new one hold the same "
            "file); allowed: each file in one layout only; move or remove one of the two copies and rerun the migration"
        )
    for source, target in planned:
        print(f"{source} -> {target}")
        if not dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
    for folder in (results / "corpus", results / "senses" / "corpus", results / "senses" / "embeddings"):
        if not dry_run and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if not dry_run:  # model folders of benchmarks emptied of their files
        for folder in _model_folders(results / "benchmarks", new_corpora(results, corpus)):
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
    aside = sum(target.is_relative_to(args.results / SET_ASIDE) for _, target in planned)
    if args.dry_run:
        print(f"{len(planned)} to move ({aside} of them set aside under {args.results / SET_ASIDE})")
    elif planned:
        print(
            f"{len(planned)} moved ({aside} set aside under {args.results / SET_ASIDE}, to be rebuilt); now "
            "`snakemake --touch --cores 1` (with the run's --configfile) records the kept files, and the next "
            "`snakemake` rebuilds the rest"
        )
    else:
        print("nothing to move: no file of the layout before the corpus level")


if __name__ == "__main__":
    main()
