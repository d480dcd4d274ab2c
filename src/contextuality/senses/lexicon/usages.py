"""WN-usages: WordNet's example sentences as a sense-tagged corpus, their same-form pairs, and that corpus's files.

A usage is an example sentence of a synset holding one of that synset's own single-word lemmas, as the
exact word or as a word whose morphy base under the synset's POS is that lemma ("ran" for run.v). Examples are
tokenised with the project's spaCy tokenizer, so the second corpus goes through the same extraction as
STS. Only lemmas whose lower-cased form is among the given corpus forms are kept, and only (lemma, POS)
with usages in at least 2 senses.
"""

from __future__ import annotations

import logging
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.corpus.sts import clean_sentence
from contextuality.corpus.words import MIN_INDEXED_WORDS, tokenize_with_offsets, word_table
from contextuality.senses.lexicon.inventory import pos_of

log = logging.getLogger(__name__)

POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "r": "adverb"}
USAGE_COLUMNS = [
    "usage_id",
    "sentence_id",
    "lemma",
    "pos",
    "synset",
    "lexname",
    "form",
    "form_lower",
    "position",
    "char_start",
    "n_senses",
]
PAIR_COLUMNS = ["usage_a", "usage_b", "lemma", "pos", "form_lower", "same_sense", "same_lexname"]


class UsageError(ValueError):
    """The usages do not match their own corpus files (a target token is not the usage's form)."""


def synsets_with_lemmas(wordnet, forms: set[str]) -> list:
    """The synsets with a lemma whose lower-cased name is in ``forms``, by name: looked up in WordNet's lemma index
    (lower-cased, as ``synsets`` reads it), not by parsing all 117,659 synsets (about 20 s)."""
    found = {synset for form in forms for synset in wordnet.synsets(form)}  # morphy's bases too: filtered here
    return sorted(
        (synset for synset in found if any(lemma.name().lower() in forms for lemma in synset.lemmas())),
        key=lambda synset: synset.name(),
    )


def candidate_usages(wordnet, forms: set[str]) -> pd.DataFrame:
    """Every (synset, lemma, example) with the lemma found in the example: the first matching token.

    Examples are cleaned as the STS sentences are (``"`` removed). A lemma is single-word (no ``_``)
    and its lower-cased form must be in ``forms``.
    """
    items = []  # (synset, lemma, pos, lexname, text)
    for synset in synsets_with_lemmas(wordnet, forms):
        examples = [clean_sentence(example) for example in synset.examples()]
        examples = [text for text in examples if text]
        if not examples:
            continue
        lemmas = sorted(
            {lemma.name() for lemma in synset.lemmas() if "_" not in lemma.name() and lemma.name().lower() in forms}
        )
        for text in examples:
            items += [(synset.name(), lemma, pos_of(synset), synset.lexname(), text) for lemma in lemmas]
    texts = sorted({item[4] for item in items})
    tokens = dict(zip(texts, tokenize_with_offsets(texts)))
    morphy_cache: dict[tuple[str, str], set[str]] = {}

    def bases(word: str, pos: str) -> set[str]:
        key = (word, pos)
        if key not in morphy_cache:
            morphy_cache[key] = {base.lower() for base in wordnet._morphy(word, pos)}
        return morphy_cache[key]

    rows = []
    for synset, lemma, pos, lexname, text in items:
        target = lemma.lower()
        for position, (word, start) in enumerate(tokens[text]):
            lower = word.lower()
            if lower == target or target in bases(lower, pos):
                rows.append((synset, lemma, pos, lexname, text, word, position, start))
                break
    return pd.DataFrame(rows, columns=["synset", "lemma", "pos", "lexname", "text", "form", "position", "char_start"])


def build_usages(
    wordnet, forms: set[str], *, max_lemmas: int | None, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The usages, their same-form pairs and the second corpus's sentences (see the module and data contract).

    ``max_lemmas`` keeps a seeded random subset of that many (lemma, POS) types, all their usages.
    """
    usages = candidate_usages(wordnet, {form.lower() for form in forms})
    return finish_usages(usages, max_lemmas=max_lemmas, seed=seed, split="wordnet")


def finish_usages(
    usages: pd.DataFrame, *, max_lemmas: int | None, seed: int, split: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The usages, pairs and sentences from candidate usages (columns of ``candidate_usages``): only (lemma, POS)
    types with usages in 2 senses or more, ``max_lemmas`` of them (seeded); ``split`` names the source in the
    sentences' ``split`` column."""
    usages = usages.copy()
    usages["lemma_key"] = usages["lemma"].str.lower()
    # a (lemma, POS) type: WordNet lemma names differ in case across synsets ("Bank"/"bank"); lower-cased here
    n_senses = usages.groupby(["lemma_key", "pos"])["synset"].transform("nunique")
    usages = usages[n_senses >= 2].assign(n_senses=n_senses[n_senses >= 2])
    types = usages[["lemma_key", "pos"]].drop_duplicates().sort_values(["lemma_key", "pos"]).reset_index(drop=True)
    log.info("%d (lemma, POS) types with usages in >= 2 senses, %d usages", len(types), len(usages))
    if max_lemmas is not None and max_lemmas < len(types):
        chosen = np.sort(np.random.default_rng(seed).choice(len(types), size=max_lemmas, replace=False))
        usages = usages.merge(types.iloc[chosen], on=["lemma_key", "pos"])
        log.info("kept a random %d types (seed %d): %d usages", max_lemmas, seed, len(usages))
    usages = usages.sort_values(["lemma_key", "pos", "synset", "text", "position"], kind="stable").reset_index(
        drop=True
    )
    usages["lemma"] = usages["lemma_key"]

    # the second corpus: one sentence per distinct example text, in order of first use
    texts = usages.drop_duplicates("text")
    synset_ids = {name: i for i, name in enumerate(sorted(usages["synset"].unique()))}
    sentences = pd.DataFrame(
        {
            "sentence_id": np.arange(len(texts), dtype=np.int64),
            "year": np.zeros(len(texts), dtype=np.int32),  # the STS-only fields hold neutral values
            "split": split,
            "domain": texts["pos"].map(POS_NAMES).to_numpy(),
            "pair_id": texts["synset"].map(synset_ids).to_numpy(np.int32),
            "side": np.zeros(len(texts), dtype=np.int8),
            "score": np.full(len(texts), np.nan),
            "text": texts["text"].to_numpy(),
        }
    )
    usages["sentence_id"] = usages["text"].map(dict(zip(sentences["text"], sentences["sentence_id"]))).astype("int64")
    usages["usage_id"] = np.arange(len(usages), dtype=np.int64)
    usages["form_lower"] = usages["form"].str.lower()
    usages = usages.astype({"position": "int32", "char_start": "int32", "n_senses": "int64"})[USAGE_COLUMNS]
    return usages, usage_pairs(usages), sentences


def check_enough_usages(usages: pd.DataFrame, n_forms: int, source: str | None = None) -> None:
    """Refuse usages the sense measures cannot use, before any model reads them: their plan needs at least
    ``MIN_INDEXED_WORDS`` word forms with 2 usages or more (a pair), as the corpus's own plan does. ``n_forms``:
    the corpus's indexed word forms WordNet knows (the inventory's). ``source``: a sense-tagged corpus's file the
    usages came from (``senses.usages.source: wsd_xml``); None: WordNet's example sentences."""
    targets = usages.drop_duplicates(["form", "sentence_id", "position"])
    sizes = targets.groupby("form").size()
    usable = int((sizes >= 2).sum())
    if usable >= MIN_INDEXED_WORDS:
        return
    lemmas = usages["lemma"].nunique()
    if source is not None:
        raise UsageError(
            f"sense usages: {source} has instances in two or more senses for {lemmas} lemma(s) among the corpus's "
            f"indexed word forms, giving {usable} word form(s) with 2 usages or more, but the sense measures need at "
            f"least {MIN_INDEXED_WORDS}: use a larger sense-tagged corpus, or set senses.usages.source: wordnet"
        )
    raise UsageError(
        f"sense usages: WordNet 3.0 knows {n_forms:,} of the corpus's indexed word forms and has example sentences in "
        f"two or more senses for {lemmas} lemma(s) of them, giving {usable} word form(s) with 2 usages or more, but the "
        "sense measures need "
        f"at least {MIN_INDEXED_WORDS} (WordNet is English: a corpus in another language, or of jargon, has few or "
        "none); set senses.enabled: false to run everything else without the word senses"
    )


def usage_pairs(usages: pd.DataFrame) -> pd.DataFrame:
    """Every unordered pair of usages of the same (lemma, POS) with the same lower-cased surface form."""
    rows = []
    for (lemma, pos, form), group in usages.groupby(["lemma", "pos", "form_lower"], sort=True):
        ids, synsets, lexnames = (group[c].to_numpy() for c in ("usage_id", "synset", "lexname"))
        for a, b in combinations(range(len(ids)), 2):
            rows.append((ids[a], ids[b], lemma, pos, form, synsets[a] == synsets[b], lexnames[a] == lexnames[b]))
    pairs = pd.DataFrame(rows, columns=PAIR_COLUMNS)
    swap = pairs["usage_a"] > pairs["usage_b"]
    pairs.loc[swap, ["usage_a", "usage_b"]] = pairs.loc[swap, ["usage_b", "usage_a"]].to_numpy()
    return pairs.astype({"usage_a": "int64", "usage_b": "int64", "same_sense": bool, "same_lexname": bool})


def check_targets(usages: pd.DataFrame, spacy_words: pd.DataFrame) -> None:
    """Refuse usages whose target token in ``spacy_words`` is not the usage's form."""
    found = usages.merge(spacy_words, on=["sentence_id", "position"], how="left")
    bad = found[found["word"] != found["form"]]
    if len(bad):
        row = bad.iloc[0]
        raise UsageError(
            f"usage {row['usage_id']}: the token at sentence {row['sentence_id']}, position {row['position']} is "
            f"{row['word']!r}, not the usage's form {row['form']!r} ({len(bad)} such usages); the tokenizer changed "
            "between building the usages and their corpus: rebuild both"
        )


def write_senses_corpus(
    usages: pd.DataFrame,
    pairs: pd.DataFrame,
    sentences: pd.DataFrame,
    *,
    usages_out: Path,
    pairs_out: Path,
    sentences_out: Path,
    spacy_words_out: Path,
    word_index_out: Path,
) -> None:
    """Write the usages, pairs and the second corpus (sentences, spacy_words, word_index), atomically.

    ``word_index`` holds only the target tokens (the usages' words as written), sorted like STS's.
    """
    spacy_words = word_table(sentences)
    check_targets(usages, spacy_words)
    index = (
        usages[["form", "sentence_id", "position"]]
        .rename(columns={"form": "word"})
        .drop_duplicates()
        .sort_values(["word", "sentence_id", "position"], kind="stable")
        .reset_index(drop=True)
    )
    for table, out in (
        (usages, usages_out),
        (pairs, pairs_out),
        (sentences, sentences_out),
        (spacy_words, spacy_words_out),
        (index, word_index_out),
    ):
        with atomic_path(out) as tmp:
            table.to_parquet(tmp, index=False)
    log.info(
        "%d usages in %d sentences (%d target tokens), %d pairs (%d same-sense)",
        len(usages),
        len(sentences),
        len(index),
        len(pairs),
        int(pairs["same_sense"].sum()),
    )
