"""Word-level tokenization and the word index (spec sections 1.3 and 8.3).

Words are spaCy tokens from the rule-based English tokenizer (``spacy.blank("en")``: no model
download). Punctuation is excluded through the lexeme flag ``is_punct``, matching is case-sensitive,
and a word is indexed when it has at least ``min_occurrences`` occurrences (what the paper's code
counts) or, optionally, that many unique contexts (distinct sentence texts, the paper's wording).
"""

from __future__ import annotations

import logging
import sys
from functools import cache, lru_cache
from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path

log = logging.getLogger(__name__)

COUNT_MODES = ("occurrences", "contexts")
MIN_INDEXED_WORDS = 2  # the measurements compare words: anisotropy baselines draw pairs of different words
MIN_SENTENCES = 2  # ... of different sentences (the exact baseline between sentences; a sampled pair of one is 1.000)


class WordIndexError(ValueError):
    """The settings leave too few indexed words to measure; the message names the settings."""


@lru_cache(maxsize=1)
def english_tokenizer():
    """spaCy's rule-based English tokenizer (``spacy.blank("en")``).

    spaCy imports thinc, which imports torch whenever it is installed (2.6 s, most of the word-index
    job); the tokenizer uses none of it. A process that has not imported torch yet imports spaCy with
    ``import torch`` failing (a None entry in ``sys.modules``), which thinc takes as torch being absent.
    """
    hide_torch = "torch" not in sys.modules
    if hide_torch:
        sys.modules["torch"] = None
    try:
        import spacy
    finally:
        if hide_torch and sys.modules.get("torch", False) is None:
            del sys.modules["torch"]
    return spacy.blank("en").tokenizer


@cache  # called once per stored unit: a few hundred thousand times per model
def is_punct(text: str) -> bool:
    """The lexeme flag the paper's code used (``nlp.vocab[token].is_punct``)."""
    return bool(english_tokenizer().vocab[text].is_punct)


def tokenize_with_offsets(texts) -> list[list[tuple[str, int]]]:
    """spaCy tokens of each text with their character offsets; whitespace tokens are dropped."""
    tokenizer = english_tokenizer()
    return [
        [(token.text, token.idx) for token in doc if not token.is_space]
        for doc in tokenizer.pipe(texts, batch_size=1000)
    ]


def tokenize(texts) -> list[list[str]]:
    """spaCy tokens of each text (no whitespace tokens)."""
    return [[word for word, _ in words] for words in tokenize_with_offsets(texts)]


def word_table(sentences: pd.DataFrame) -> pd.DataFrame:
    """One row per spaCy token of every sentence: sentence_id, position, word, char_start, is_punct.

    ``char_start`` lets the extraction step align a model's pieces (by character offsets) to words.
    """
    tokens = tokenize_with_offsets(sentences["text"].tolist())
    lengths = [len(words) for words in tokens]
    flat = [word for words in tokens for word, _ in words]
    table = pd.DataFrame(
        {
            "sentence_id": sentences["sentence_id"].repeat(lengths).to_numpy(),
            "position": [position for n in lengths for position in range(n)],
            "word": flat,
            "char_start": [start for words in tokens for _, start in words],
        }
    )
    punct_of = {word: is_punct(word) for word in set(flat)}
    table["is_punct"] = table["word"].map(punct_of).astype(bool)
    return table.astype({"sentence_id": "int64", "position": "int32", "char_start": "int32"})


def word_index(words: pd.DataFrame, sentences: pd.DataFrame, min_occurrences: int, count: str) -> pd.DataFrame:
    """The indexed occurrences: non-punctuation words that pass the threshold.

    ``count="occurrences"`` counts every occurrence (repeats in a sentence and duplicate sentences
    count separately, as the paper's code does); ``count="contexts"`` counts distinct sentence texts.
    """
    if count not in COUNT_MODES:
        raise ValueError(f"words.count is {count!r}; allowed: {', '.join(COUNT_MODES)}")
    candidates = words[~words["is_punct"]]
    counts = support(words, sentences, count)
    kept = counts.index[counts >= min_occurrences]
    index = candidates[candidates["word"].isin(kept)][["word", "sentence_id", "position"]]
    return index.sort_values(["word", "sentence_id", "position"], kind="stable").reset_index(drop=True)


def support(words: pd.DataFrame, sentences: pd.DataFrame, count: str) -> pd.Series:
    """Occurrences (or distinct sentence texts) of every non-punctuation word: the threshold's count.

    ``words`` needs ``word``, ``sentence_id`` and ``is_punct`` (spaCy words, or a model's pieces).
    """
    candidates = words[~words["is_punct"]]
    if count == "occurrences":
        return candidates.groupby("word").size()
    text_of = sentences.set_index("sentence_id")["text"]
    return candidates.assign(text=candidates["sentence_id"].map(text_of)).groupby("word")["text"].nunique()


def check_enough_words(
    index: pd.DataFrame,
    words: pd.DataFrame,
    sentences: pd.DataFrame,
    *,
    min_occurrences: int,
    count: str,
    corpus_settings: dict | None = None,
) -> None:
    """Raise WordIndexError, in one line naming the settings, when fewer than 2 words are indexed, or the corpus
    holds fewer than 2 sentences.

    Every later step would run (extraction takes the longest) and the measurements then fail; this
    stops the run at the word index instead. ``corpus_settings`` (``{"corpus.max_sentences": 120,
    ...}``) are named in the message as the other ways to get more words.
    """
    n_words = index["word"].nunique()
    corpus = ", ".join(f"{key}: {value}" for key, value in (corpus_settings or {}).items())
    if n_words >= MIN_INDEXED_WORDS:
        if len(sentences) < MIN_SENTENCES:
            raise WordIndexError(
                f"corpus: {len(sentences)} sentence{'s' if len(sentences) != 1 else ''}"
                f"{f' ({corpus})' if corpus else ''}, and the measures need at least {MIN_SENTENCES}: the anisotropy "
                "baselines compare words of different sentences; use more sentences"
            )
        return
    found = "no word reaches" if n_words == 0 else f"only 1 word ({index['word'].iloc[0]!r}) reaches"
    # The highest threshold that would index 2 words: the support of the second most frequent word.
    counts = support(words, sentences, count).sort_values(ascending=False, kind="stable")
    reachable = int(counts.iloc[MIN_INDEXED_WORDS - 1]) if len(counts) >= MIN_INDEXED_WORDS else 0
    more = f"use more sentences ({corpus})" if corpus else "use more sentences"
    remedy = f"words.min_occurrences: {reachable} or lower would index 2, or {more}" if reachable >= 2 else more
    raise WordIndexError(
        f"word index: {found} words.min_occurrences: {min_occurrences} (words.count: {count}) in "
        f"{len(sentences)} sentences, and the measurements need at least {MIN_INDEXED_WORDS} words; {remedy}"
    )


def build_word_index(
    sentences_parquet: Path,
    out_words: Path,
    out_index: Path,
    *,
    min_occurrences: int,
    count: str,
    corpus_settings: dict | None = None,
) -> pd.DataFrame:
    """Write ``words.parquet`` (every token) and ``word_index.parquet`` (the indexed occurrences).

    Raises WordIndexError (nothing written) when fewer than 2 words are indexed; ``corpus_settings``
    are named in its message.
    """
    sentences = pd.read_parquet(sentences_parquet)
    words = word_table(sentences)
    index = word_index(words, sentences, min_occurrences, count)
    n_words = index["word"].nunique()
    log.info(
        "%d tokens (%d punctuation) in %d sentences; %d sentences have no word token",
        len(words),
        int(words["is_punct"].sum()),
        len(sentences),
        len(sentences) - words["sentence_id"].nunique(),
    )
    only_punct = words.groupby("sentence_id")["is_punct"].all()
    log.info("%d sentences are only punctuation (kept, with no indexed word)", int(only_punct.sum()))
    log.info(
        "indexed %d words (%s >= %d) with %d occurrences; %d lower-cased forms",
        n_words,
        count,
        min_occurrences,
        len(index),
        index["word"].str.lower().nunique(),
    )
    check_enough_words(
        index, words, sentences, min_occurrences=min_occurrences, count=count, corpus_settings=corpus_settings
    )
    with atomic_path(out_words) as tmp:
        words.to_parquet(tmp, index=False)
    with atomic_path(out_index) as tmp:
        index.to_parquet(tmp, index=False)
    return index
