"""Context diversity against a brute-force pair loop, and its known values."""

import numpy as np
import pandas as pd
import pytest

from contextuality.corpus.words import word_table
from contextuality.senses.sts.diversity import context_diversity, sentence_vectors

TEXTS = [
    "The bank raised rates.",
    "She sat on the river bank.",
    "The bank raised rates.",
    "bank",
    "Rates rose, the bank said.",
    "A cat sat.",
    "The cat sat on the mat.",
]


def corpus(texts):
    sentences = pd.DataFrame({"sentence_id": np.arange(len(texts), dtype=np.int64) + 10, "text": texts})
    words = word_table(sentences)
    index = words[~words["is_punct"]][["word", "sentence_id", "position"]].reset_index(drop=True)
    return sentences, words, index


def brute_force(sentences, words, index):
    matrix, vocabulary = sentence_vectors(sentences, words)
    dense = matrix.toarray()
    row_of = dict(zip(sentences["sentence_id"], range(len(sentences))))
    result = {}
    for word, group in index.groupby("word"):
        vectors = []
        for sentence_id in group["sentence_id"]:
            v = dense[row_of[sentence_id]].copy()
            v[vocabulary[word.lower()]] = 0.0
            norm = np.linalg.norm(v)
            vectors.append(v / norm if norm > 0 else v)
        cosines = [vectors[i] @ vectors[j] for i in range(len(vectors)) for j in range(len(vectors)) if i != j]
        result[word] = 1.0 - np.mean(cosines) if cosines else np.nan
    return pd.Series(result)


def test_matches_brute_force():
    sentences, words, index = corpus(TEXTS)
    table = context_diversity(sentences, words, index).set_index("word")
    expected = brute_force(sentences, words, index)
    pd.testing.assert_series_equal(table["context_diversity"], expected.reindex(table.index), check_names=False)
    assert table.loc["bank", "n"] == 5 and table.loc["bank", "n_sentences"] == 5
    assert np.isnan(table.loc["river", "context_diversity"])  # one occurrence: no pair


def test_same_sentence_text_gives_zero():
    sentences, words, index = corpus(["The bank raised rates.", "The bank raised rates.", "The bank raised rates."])
    table = context_diversity(sentences, words, index).set_index("word")
    assert table.loc["bank", "context_diversity"] == pytest.approx(0.0, abs=1e-12)


def test_emptied_sentence_is_a_zero_vector():
    # "bank" alone: its vector without "bank" is empty, cosine 0 with the other sentence's
    sentences, words, index = corpus(["bank", "The bank raised rates."])
    table = context_diversity(sentences, words, index).set_index("word")
    assert table.loc["bank", "context_diversity"] == pytest.approx(1.0)
