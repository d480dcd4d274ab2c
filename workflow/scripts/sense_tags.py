"""Snakemake entry point: the corpus's spaCy words + the tagger + WordNet 3.0 -> each form's POS, lemma and synsets."""

from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import script_job
from contextuality.senses.lexicon.tagger import TaggerError, load_tagger, tag_words, tagged_forms
from contextuality.senses.lexicon.wordnet import WordNetError, index_synset_counts

with script_job(snakemake, TaggerError, WordNetError):
    nlp = load_tagger(Path(snakemake.input.record).parent)
    synset_counts = index_synset_counts(Path(snakemake.input.wordnet_record).parent)
words = pd.read_parquet(snakemake.input.spacy_words)
forms = tagged_forms(tag_words(words, nlp), words, synset_counts)
with atomic_path(snakemake.output.forms) as tmp:
    forms.to_parquet(tmp, index=False)
