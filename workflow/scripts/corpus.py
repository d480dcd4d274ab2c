"""Snakemake entry point: a corpus -> sentences.parquet and its record.

The STS corpus: its scored pairs (bundled, parsed by sts_pairs; or from the hub, via `datasets`). Any other
corpus (a text file, a table or a dataset): read by contextuality.corpus.sources.
"""

import json
from pathlib import Path

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import CorpusSettings, from_params
from contextuality.corpus.sources import is_sts, load_source, sts_record
from contextuality.corpus.sts import CorpusError, build_corpus


def sts_corpus(corpus: CorpusSettings):
    """The STS sentences, written to the output by build_corpus, and their record."""
    sentences = build_corpus(
        Path(snakemake.output.sentences),
        source=corpus.source,
        pairs_jsonl=Path(snakemake.input.pairs) if snakemake.input.pairs else None,
        years=list(corpus.years),
        include_2012_train=corpus.include_2012_train,
        max_sentences=corpus.max_sentences,
        hub_revisions=corpus.hub_revisions,
    )
    record = sts_record(corpus.source, sentences, release_files=list(snakemake.input.release_files),
                        years=list(corpus.years), include_2012_train=corpus.include_2012_train,
                        hub_revisions=corpus.hub_revisions)  # fmt: skip
    return record


setup_job_logging(snakemake.log[0])
corpus = from_params(CorpusSettings, snakemake.params.corpus)
corpus = CorpusSettings(
    **{**vars(corpus), "hub_revisions": {int(year): rev for year, rev in corpus.hub_revisions.items()}}
)
if is_sts(corpus.source):
    record = sts_corpus(corpus)
else:
    with expected_errors(CorpusError):  # a malformed corpus: its one line, naming file:line
        sentences, record = load_source(corpus)
    with atomic_path(Path(snakemake.output.sentences)) as tmp:
        sentences.to_parquet(tmp, index=False)
with atomic_path(Path(snakemake.output.record)) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
