"""Snakemake entry point: a corpus other than STS (a text file, a table or a dataset) -> sentences.parquet and its record."""
import json
from pathlib import Path

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import CorpusSettings, from_params
from contextuality.corpus.sources import load_source
from contextuality.corpus.sts import CorpusError

setup_job_logging(snakemake.log[0])
with expected_errors(CorpusError):  # a malformed corpus: its one line, naming file:line
    sentences, record = load_source(from_params(CorpusSettings, snakemake.params.corpus))
with atomic_path(Path(snakemake.output.sentences)) as tmp:
    sentences.to_parquet(tmp, index=False)
with atomic_path(Path(snakemake.output.record)) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
