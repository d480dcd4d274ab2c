"""Snakemake entry point: scored pairs (bundled or hub, via `datasets`) -> sentences.parquet."""
from pathlib import Path

from contextuality.corpus.sts import build_corpus
from contextuality.core.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
build_corpus(
    Path(snakemake.output.sentences),
    source=snakemake.params.source,
    pairs_jsonl=Path(snakemake.input.pairs) if snakemake.input.pairs else None,
    years=snakemake.params.years,
    include_2012_train=snakemake.params.include_2012_train,
    max_sentences=snakemake.params.max_sentences,
    hub_revisions={int(year): rev for year, rev in snakemake.params.hub_revisions.items()},
)
