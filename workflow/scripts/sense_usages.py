"""Snakemake entry point: WordNet 3.0 examples of the inventory's words -> usages, pairs and the second corpus."""

from pathlib import Path

import pandas as pd

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.senses.usages import UsageError, build_usages, check_enough_usages, write_senses_corpus
from contextuality.senses.wordnet import WordNetError, load_wordnet

setup_job_logging(snakemake.log[0])
with expected_errors(WordNetError, UsageError):
    wordnet = load_wordnet(Path(snakemake.input.record).parent)
    forms = set(pd.read_parquet(snakemake.input.inventory, columns=["form"])["form"])
    usages, pairs, sentences = build_usages(
        wordnet, forms, max_lemmas=snakemake.params.max_lemmas, seed=snakemake.params.seed
    )
    check_enough_usages(usages, len(forms))  # here, not at the plan after extraction: a corpus WordNet cannot read
    write_senses_corpus(
        usages,
        pairs,
        sentences,
        usages_out=Path(snakemake.output.usages),
        pairs_out=Path(snakemake.output.pairs),
        sentences_out=Path(snakemake.output.sentences),
        spacy_words_out=Path(snakemake.output.spacy_words),
        word_index_out=Path(snakemake.output.word_index),
    )
