"""Snakemake entry point: sentences -> every spaCy token and the word index."""
from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.corpus.words import WordIndexError, build_word_index

setup_job_logging(snakemake.log[0])
corpus = snakemake.config["corpus"]  # named in the message when too few words are indexed
with expected_errors(WordIndexError):
    build_word_index(
        Path(snakemake.input.sentences),
        Path(snakemake.output.words),
        Path(snakemake.output.index),
        min_occurrences=snakemake.params.min_occurrences,
        count=snakemake.params.count_mode,
        corpus_settings={f"corpus.{key}": corpus[key] for key in ("max_sentences", "years")},
    )
