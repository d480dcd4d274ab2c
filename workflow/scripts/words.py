"""Snakemake entry point: sentences -> every spaCy token and the word index."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import Settings, WordSettings, from_params
from contextuality.corpus.sources import settings_for_more_sentences
from contextuality.corpus.words import WordIndexError, build_word_index

setup_job_logging(snakemake.log[0])
words = from_params(WordSettings, snakemake.params.words)
corpus = Settings.from_config(snakemake.config).corpus  # named in the message when too few words are indexed
with expected_errors(WordIndexError):
    build_word_index(
        Path(snakemake.input.sentences),
        Path(snakemake.output.words),
        Path(snakemake.output.index),
        min_occurrences=words.min_occurrences,
        count=words.count,
        corpus_settings=settings_for_more_sentences(corpus),
    )
