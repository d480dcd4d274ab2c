"""Snakemake entry point: sentences -> every spaCy token and the word index."""
from pathlib import Path

from contextuality.runtime import setup_job_logging
from contextuality.words import build_word_index

setup_job_logging(snakemake.log[0])
build_word_index(
    Path(snakemake.input.sentences),
    Path(snakemake.output.words),
    Path(snakemake.output.index),
    min_occurrences=snakemake.params.min_occurrences,
    count=snakemake.params.count_mode,
)
