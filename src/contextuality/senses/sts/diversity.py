"""Context diversity of each indexed word: how different the sentences it occurs in are (P1).

CD_w = 1 - mean over pairs i != j of w's occurrences of cos(t_i, t_j), where t_i is the TF-IDF vector
(scikit-learn, lower-cased spaCy tokens, punctuation left out) of occurrence i's sentence with the word
itself removed. With u_i = t_i / |t_i|, sum_{i != j} u_i.u_j = |sum_i u_i|^2 - sum_i |u_i|^2, so no pair
loop is needed. A sentence that held nothing but w (and punctuation) gives a zero vector: it stays in
the pairs, with cosine 0 to every other occurrence (the most diverse value, not left out), and
counts 0, not 1, in sum_i |u_i|^2. A word with a single occurrence has no pair: CD is NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize


def sentence_vectors(sentences: pd.DataFrame, spacy_words: pd.DataFrame) -> tuple[sp.csr_matrix, dict[str, int]]:
    """Raw TF-IDF rows (no normalisation) of every sentence in ``sentences`` order, and the vocabulary."""
    tokens = spacy_words[~spacy_words["is_punct"]]
    docs = tokens.assign(lower=tokens["word"].str.lower()).groupby("sentence_id")["lower"].agg(list)
    docs = docs.reindex(sentences["sentence_id"]).apply(lambda d: d if isinstance(d, list) else [])
    vectorizer = TfidfVectorizer(analyzer=lambda doc: doc, norm=None)  # tokens given: spaCy's, lower-cased
    matrix = vectorizer.fit_transform(docs.tolist()).tocsr()
    return matrix, vectorizer.vocabulary_


def context_diversity(sentences: pd.DataFrame, spacy_words: pd.DataFrame, word_index: pd.DataFrame) -> pd.DataFrame:
    """One row per word of ``word_index``: word, n (occurrences), n_sentences (distinct ids), context_diversity."""
    matrix, vocabulary = sentence_vectors(sentences, spacy_words)
    row_of = pd.Series(np.arange(len(sentences)), index=sentences["sentence_id"].to_numpy())
    index = word_index.sort_values(["word", "sentence_id", "position"], kind="stable").reset_index(drop=True)
    occurrences = matrix[row_of.loc[index["sentence_id"]].to_numpy()].tocoo()
    # remove the word itself from its own sentence's vector
    own = index["word"].str.lower().map(vocabulary).fillna(-1).to_numpy(np.int64)
    keep = occurrences.col != own[occurrences.row]
    vectors = sp.csr_matrix(
        (occurrences.data[keep], (occurrences.row[keep], occurrences.col[keep])), shape=occurrences.shape
    )
    units = normalize(vectors, norm="l2")  # a zero row stays zero
    words, word_ids = np.unique(index["word"].to_numpy(), return_inverse=True)
    group = sp.csr_matrix((np.ones(len(index)), (word_ids, np.arange(len(index)))), shape=(len(words), len(index)))
    sums = group @ units
    total = np.asarray(sums.multiply(sums).sum(axis=1), dtype=np.float64).ravel()  # |sum u_i|^2
    self_terms = np.bincount(
        word_ids, weights=np.asarray(units.multiply(units).sum(axis=1)).ravel(), minlength=len(words)
    )  # sum |u_i|^2: 1 per non-empty vector
    n = np.bincount(word_ids, minlength=len(words)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_cos = (total - self_terms) / (n * (n - 1))
    n_sentences = index.groupby("word")["sentence_id"].nunique().reindex(words).to_numpy()
    return pd.DataFrame(
        {
            "word": words,
            "n": n.astype(np.int64),
            "n_sentences": n_sentences.astype(np.int64),
            "context_diversity": np.where(n > 1, 1.0 - mean_cos, np.nan),
        }
    )
