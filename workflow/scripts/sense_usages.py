"""Snakemake entry point: the inventory's words in WordNet 3.0's examples (or in a sense-tagged corpus in the WSD
evaluation format, senses.usages.source: wsd_xml) -> usages, pairs and the second corpus."""

from pathlib import Path

import pandas as pd

from contextuality.core.runtime import script_job
from contextuality.senses.lexicon.usages import UsageError, build_usages, check_enough_usages, write_senses_corpus
from contextuality.senses.lexicon.wordnet import WordNetError, load_wordnet
from contextuality.senses.lexicon.wsd_corpus import build_wsd_usages

with script_job(snakemake, WordNetError, UsageError):
    wordnet = load_wordnet(Path(snakemake.input.record).parent)
    forms = set(pd.read_parquet(snakemake.input.inventory, columns=["form"])["form"])
    sample = {"max_lemmas": snakemake.params.max_lemmas, "seed": snakemake.params.seed}
    if hasattr(snakemake.input, "wsd_xml"):  # senses.usages.source: wsd_xml
        xml, gold_key = Path(snakemake.input.wsd_xml), Path(snakemake.input.wsd_gold_key)
        usages, pairs, sentences = build_wsd_usages(wordnet, xml, gold_key, forms, **sample)
        check_enough_usages(usages, len(forms), source=str(xml))
    else:
        usages, pairs, sentences = build_usages(wordnet, forms, **sample)
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
