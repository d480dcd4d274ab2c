"""Snakemake entry point: scored pairs (bundled or hub, via `datasets`) -> sentences.parquet and its record."""
import json
from pathlib import Path

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.corpus.sources import sts_record
from contextuality.corpus.sts import build_corpus

setup_job_logging(snakemake.log[0])
sentences = build_corpus(
    Path(snakemake.output.sentences),
    source=snakemake.params.source,
    pairs_jsonl=Path(snakemake.input.pairs) if snakemake.input.pairs else None,
    years=snakemake.params.years,
    include_2012_train=snakemake.params.include_2012_train,
    max_sentences=snakemake.params.max_sentences,
    hub_revisions={int(year): rev for year, rev in snakemake.params.hub_revisions.items()},
)
record = sts_record(snakemake.params.source, sentences, release_files=list(snakemake.input.release_files),
                    years=snakemake.params.years, include_2012_train=snakemake.params.include_2012_train,
                    hub_revisions={int(year): rev for year, rev in snakemake.params.hub_revisions.items()})
with atomic_path(Path(snakemake.output.record)) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
