"""Sense by nearest neighbour on WordNet usages (A3 and C5), on a ``SeparationDesign``.

* A3 1-NN sense, leave-one-out among the other usages of the same word. Ties (equal cosines, e.g. identical
  vectors) go to the usage with the smallest ``usage_id``: the neighbour search sorts each row's distances
  stably, in column order. Beside it: the leave-one-out majority sense, exact chance, and the ceiling.
* C5 ARI of k-means (K = the word's number of senses) against the gold senses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.neighbors import NearestNeighbors
from threadpoolctl import threadpool_limits

from contextuality.senses.separation.pair_scores import interval

# Added to every stored kNN distance (1 − cos ∈ [0, 2]): a shift keeps the order, and keeps identical
# vectors (distance 0) from looking like absent entries and rounding (1 − cos < 0) from being refused.
_DISTANCE_SHIFT = 1.0


def knn_measures(design, cos, pair_ok) -> dict:
    """A3: the 1-NN sense of each usable usage among the other usages of its word (leave-one-out), its
    majority and chance baselines, the ceiling, and a lemma-bootstrap interval."""
    a, b = design.a[pair_ok], design.b[pair_ok]
    dist = 1.0 - cos[pair_ok] + _DISTANCE_SHIFT
    rows, cols, dist = np.r_[a, b], np.r_[b, a], np.r_[dist, dist]
    # Each row's entries sorted by distance, then by usage_id: the neighbour search keeps this order
    # (it is already sorted by value), so a tie goes to the smallest usage_id.
    order = np.lexsort((cols, dist, rows))
    indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=design.n))]
    graph = sp.csr_matrix((dist[order], cols[order], indptr), shape=(design.n, design.n))
    has = np.flatnonzero(np.diff(indptr) > 0)
    if has.size == 0:
        return {
            "knn_accuracy": np.nan,
            "knn_majority": np.nan,
            "knn_chance": np.nan,
            "knn_ceiling": np.nan,
            "knn_ci_low": np.nan,
            "knn_ci_high": np.nan,
            "n_knn": 0,
        }
    nn = NearestNeighbors(n_neighbors=1, metric="precomputed").fit(graph)
    query = graph if has.size == design.n else graph[has]
    neighbour = nn.kneighbors(query, n_neighbors=1, return_distance=False)[:, 0]
    hits = design.sense[neighbour] == design.sense[has]
    majority, chance = majority_and_chance(design.word, design.sense, has)
    # The ceiling: a usage can be right only if another usable usage of its word has its sense.
    cell = pd.Series(design.word[has] * (int(design.sense.max()) + 1) + design.sense[has])
    ceiling = float(np.mean(cell.map(cell.value_counts()).to_numpy() >= 2))
    lemma_hits = np.bincount(design.lemma[has], weights=hits.astype(np.float64), minlength=design.n_lemmas)
    lemma_n = np.bincount(design.lemma[has], minlength=design.n_lemmas).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        low, high = interval((design.boot_lemma_counts @ lemma_hits) / (design.boot_lemma_counts @ lemma_n))
    return {
        "knn_accuracy": float(np.mean(hits)),
        "knn_majority": majority,
        "knn_chance": chance,
        "knn_ceiling": ceiling,
        "knn_ci_low": low,
        "knn_ci_high": high,
        "n_knn": int(has.size),
    }


def majority_and_chance(word: np.ndarray, sense: np.ndarray, used: np.ndarray) -> tuple[float, float]:
    """Leave-one-out majority sense and exact chance over the usages ``used`` (all usable in their words).

    Majority: the sense most frequent among the word's other usages; a tie goes to the sense whose first
    usage (smallest usage_id in the word) comes first.
    """
    t = pd.DataFrame({"word": word[used], "sense": sense[used], "id": used})
    cells = t.groupby(["word", "sense"], sort=False)["id"].agg(["size", "min"]).reset_index()
    cells = cells.sort_values(["word", "size", "min"], ascending=[True, False, True])
    rank = cells.groupby("word").cumcount().to_numpy()
    top = cells[rank == 0].set_index("word")[["sense", "size", "min"]].add_suffix("_1")
    second = cells[rank == 1].set_index("word")[["size", "min"]].add_suffix("_2")
    t = t.join(top, on="word").join(second, on="word")
    # Leaving i out only lowers its own sense's count, so the prediction is the top sense unless i
    # belongs to it and the runner-up then wins; i is right only if it belongs to the top sense.
    n1 = t["size_1"] - 1
    wins = t["size_2"].isna() | (n1 > t["size_2"]) | ((n1 == t["size_2"]) & (t["min_1"] < t["min_2"]))
    majority = float(np.mean((t["sense"] == t["sense_1"]) & wins))
    n_w = t.groupby("word")["id"].transform("size").to_numpy(np.float64)
    cells["pairs"] = cells["size"] * (cells["size"] - 1.0)
    same = cells.groupby("word")["pairs"].sum()
    chance = float(np.mean(same.reindex(t["word"]).to_numpy() / (n_w * (n_w - 1))))
    return majority, chance


def ari_measures(word: np.ndarray, sense: np.ndarray, unit, valid, seed) -> dict:
    """C5: mean ARI of k-means (K = the word's senses) against the gold senses, over words with ≥ 2
    senses and ≥ 4 usable usages (a k-means fit per word: ~4 ms each)."""
    t = pd.DataFrame({"word": word, "sense": sense})[valid]
    groups = [g for _, g in t.groupby("word", sort=True) if len(g) >= 4 and g["sense"].nunique() >= 2]
    scores = []
    with threadpool_limits(1):  # a multi-threaded BLAS costs ~10x per tiny k-means fit here
        for g in groups:
            km = KMeans(n_clusters=g["sense"].nunique(), n_init=3, random_state=seed)
            scores.append(adjusted_rand_score(g["sense"].to_numpy(), km.fit_predict(unit[g.index.to_numpy()])))
    return {"ari": float(np.mean(scores)) if scores else np.nan, "n_words_ari": len(scores)}
