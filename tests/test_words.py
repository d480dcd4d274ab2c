"""The word index on a hand-made corpus whose counts are known."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from conftest import run_command
from contextuality.corpus.words import build_word_index, tokenize, word_index, word_table

SIX_SENTENCES = [
    "The dog runs.",
    "The dog sleeps!",
    "A dog, a cat.",
    "The cat runs.",
    "The dog runs.",  # a duplicate sentence: counts again as an occurrence, not as a context
    "the dog dog",  # lower-case 'the' is another word; 'dog' twice in one sentence
]


@pytest.fixture
def sentences() -> pd.DataFrame:
    return pd.DataFrame({"sentence_id": range(6), "text": SIX_SENTENCES})


def test_tokens_and_punctuation(sentences):
    assert tokenize(["A dog, a cat."]) == [["A", "dog", ",", "a", "cat", "."]]
    words = word_table(sentences)
    assert words[words["is_punct"]]["word"].tolist() == [".", "!", ",", ".", ".", "."]
    assert words[words["sentence_id"] == 2]["position"].tolist() == [0, 1, 2, 3, 4, 5]


def test_threshold_counts_occurrences(sentences):
    index = word_index(word_table(sentences), sentences, min_occurrences=4, count="occurrences")
    counts = index.groupby("word").size().to_dict()
    assert counts == {"The": 4, "dog": 6}  # case-sensitive: 'the' (1) is not 'The'
    assert index[index["word"] == "dog"][["sentence_id", "position"]].values.tolist() == [
        [0, 1],
        [1, 1],
        [2, 1],
        [4, 1],
        [5, 1],
        [5, 2],
    ]


def test_threshold_counts_unique_contexts(sentences):
    words = word_table(sentences)
    by_context = word_index(words, sentences, min_occurrences=4, count="contexts")
    # 'dog' occurs in 5 sentences but only 4 distinct texts; 'The' in 4 sentences, 3 distinct texts.
    assert set(by_context["word"]) == {"dog"}
    by_context_3 = word_index(words, sentences, min_occurrences=3, count="contexts")
    assert set(by_context_3["word"]) == {"dog", "The"}
    by_occurrence_3 = word_index(words, sentences, min_occurrences=3, count="occurrences")
    assert set(by_occurrence_3["word"]) == {"dog", "The", "runs"}


def test_punctuation_is_never_indexed(sentences):
    index = word_index(word_table(sentences), sentences, min_occurrences=1, count="occurrences")
    assert not set(index["word"]) & {".", ",", "!"}


def test_unknown_count_mode_is_refused(sentences):
    with pytest.raises(ValueError, match="words.count is 'types'; allowed: occurrences, contexts"):
        word_index(word_table(sentences), sentences, min_occurrences=1, count="types")


def test_build_writes_both_tables(tmp_path, sentences):
    sentences.to_parquet(tmp_path / "sentences.parquet")
    index = build_word_index(
        tmp_path / "sentences.parquet",
        tmp_path / "words.parquet",
        tmp_path / "index.parquet",
        min_occurrences=4,
        count="occurrences",
    )
    assert pd.read_parquet(tmp_path / "index.parquet").equals(index)
    assert len(pd.read_parquet(tmp_path / "words.parquet")) == 4 + 4 + 6 + 4 + 4 + 3


TOKENIZE_WITHOUT_TORCH = """
import sys
from contextuality.corpus.words import english_tokenizer
assert [t.text for t in english_tokenizer()("The dog, again.")] == ["The", "dog", ",", "again", "."]
assert "torch" not in sys.modules, "spaCy's import pulled in torch"
import thinc.compat
assert not thinc.compat.has_torch
import torch  # the hidden import is restored: torch still imports afterwards
print(torch.zeros(2).sum().item())
"""


def test_the_tokenizer_imports_no_torch_and_leaves_it_importable():
    """The word-index job spends no 2.6 s importing torch for spaCy's thinc, and torch imports after it."""
    result = run_command([sys.executable, "-c", TOKENIZE_WITHOUT_TORCH], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "0.0"


def test_a_corpus_of_one_sentence_is_refused_by_name(tmp_path):
    """One sentence whose words repeat passed the word index, then every sampled baseline pair was one vector
    (1.000) and no exact baseline compared different sentences."""
    from contextuality.corpus.words import WordIndexError

    pd.DataFrame({"sentence_id": [0], "text": ["The bank by the bank of the bank."]}).to_parquet(tmp_path / "s.parquet")
    out = (tmp_path / "words.parquet", tmp_path / "index.parquet")
    with pytest.raises(WordIndexError, match=r"^corpus: 1 sentence \(corpus.path: mine.txt, corpus.max_sentences: None\), "
                                             r"and the measures need at least 2: the anisotropy baselines compare words "
                                             r"of different sentences; use more sentences$"):  # fmt: skip
        build_word_index(
            tmp_path / "s.parquet",
            *out,
            min_occurrences=2,
            count="occurrences",
            corpus_settings={"corpus.path": "mine.txt", "corpus.max_sentences": None},
        )
    assert not any(path.exists() for path in out)
