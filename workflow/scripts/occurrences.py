"""Snakemake entry point: stored units + word index -> the rows measured as word occurrences."""
from pathlib import Path

from contextuality.extract import write_occurrences
from contextuality.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
write_occurrences(
    Path(snakemake.input.units),
    Path(snakemake.input.word_index),
    Path(snakemake.input.sentences),
    Path(snakemake.output.occurrences),
    indexing=snakemake.params.spec["indexing"],
    min_occurrences=snakemake.params.words["min_occurrences"],
    count=snakemake.params.words["count"],
)
