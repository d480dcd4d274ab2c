"""Snakemake entry point: the corpus's word index + WordNet 3.0 -> the sense inventory (one row per form)."""

from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import script_job
from contextuality.senses.lexicon.inventory import sense_inventory
from contextuality.senses.lexicon.wordnet import WordNetError, load_wordnet

with script_job(snakemake, WordNetError):
    wordnet = load_wordnet(Path(snakemake.input.record).parent)
inventory = sense_inventory(pd.read_parquet(snakemake.input.word_index), wordnet)
with atomic_path(snakemake.output.inventory) as tmp:
    inventory.to_parquet(tmp, index=False)
