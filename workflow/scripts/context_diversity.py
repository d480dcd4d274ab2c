"""Snakemake entry point: the STS corpus's sentences, spaCy words and word index -> each word's context diversity."""

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.senses.sts.diversity import context_diversity

setup_job_logging(snakemake.log[0])
table = context_diversity(
    pd.read_parquet(snakemake.input.sentences),
    pd.read_parquet(snakemake.input.spacy_words),
    pd.read_parquet(snakemake.input.word_index),
)
with atomic_path(snakemake.output.diversity) as tmp:
    table.to_parquet(tmp, index=False)
