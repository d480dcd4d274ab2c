"""Labelled sense separation on WordNet usages (spec senses.md §3(a): A1, A2, A3 and C5).

``SeparationDesign(usages, pairs)`` holds everything that does not depend on the vectors: the pairs, the
word group of each pair (lemma, POS, lower-cased form), the B within-group label permutations as one sparse
(B·G × pairs) matrix, and the bootstrap resamples of lemmas. ``design.measure(vectors)`` then gives one
layer's measures with matrix products only, so a job builds the design once and calls it per layer and
preprocessing.

* A1 Δ̄: mean over words with both kinds of pair of (mean same-sense cosine − mean different-sense cosine),
  against B label permutations within each word.
* A2 AUROC of the pair cosine: same-sense against different-sense pairs (fine), and against pairs whose
  lexnames differ (coarse). Ties count ½.
* A3 1-NN sense, leave-one-out among the other usages of the same word. Ties (equal cosines, e.g. identical
  vectors) go to the usage with the smallest ``usage_id``: the neighbour search sorts each row's distances
  stably, in column order.
* C5 ARI of k-means (K = the word's number of senses) against the gold senses (``ari=True``; it costs a
  k-means fit per word).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, roc_auc_score
from sklearn.neighbors import NearestNeighbors
from threadpoolctl import threadpool_limits

from contextuality.senses.vectors import unit_rows

USAGE_COLUMNS = ["usage_id", "lemma", "pos", "synset", "lexname", "form_lower", "position"]
PAIR_COLUMNS = ["usage_a", "usage_b", "same_sense", "same_lexname"]
# Added to every stored kNN distance (1 − cos ∈ [0, 2]): a shift keeps the order, and keeps identical
# vectors (distance 0) from looking like absent entries and rounding (1 − cos < 0) from being refused.
_DISTANCE_SHIFT = 1.0


def _check_columns(table: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"SeparationDesign: {name} lacks columns {missing}; it needs {columns}")


def _within_group_permutations(group: np.ndarray, labels: np.ndarray, b: int, rng) -> np.ndarray:
    """(b, n) int32: the labels shuffled within each group, independently in each row."""
    base = np.argsort(group, kind="stable")
    keys = group[None, :] + rng.random((b, group.size))  # group then a random key: a shuffle within groups
    order = np.argsort(keys, axis=1)
    out = np.empty((b, group.size), dtype=np.int32)
    np.put_along_axis(out, np.broadcast_to(base, (b, group.size)), labels[order].astype(np.int32), axis=1)
    return out


def _pair_cosines(unit: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """cos of each pair (a[k], b[k]) of unit rows, gathered in chunks (a full gather is pairs × d floats)."""
    out = np.empty(a.size)
    for start in range(0, a.size, chunk):
        sl = slice(start, start + chunk)
        out[sl] = np.einsum("ij,ij->i", unit[a[sl]], unit[b[sl]])
    return out


class SeparationDesign:
    """The vector-independent part of the sense-separation measures, built once per usage set."""

    def __init__(self, usages: pd.DataFrame, pairs: pd.DataFrame, *, permutations: int = 1000,
                 bootstrap: int = 200, seed: int = 0):
        _check_columns(usages, USAGE_COLUMNS, "usages")
        _check_columns(pairs, PAIR_COLUMNS, "pairs")
        n = len(usages)
        if not np.array_equal(usages["usage_id"].to_numpy(), np.arange(n)):
            raise ValueError("SeparationDesign: usages.usage_id must be 0..n-1 in row order; sort and renumber")
        self.n = n
        self.a = pairs["usage_a"].to_numpy(np.int64)
        self.b = pairs["usage_b"].to_numpy(np.int64)
        if self.a.size and (min(self.a.min(), self.b.min()) < 0 or max(self.a.max(), self.b.max()) >= n):
            raise ValueError(f"SeparationDesign: a pair names a usage outside 0..{n - 1}; rebuild the pairs")
        word_key = usages[["lemma", "pos", "form_lower"]].astype(str).agg("\x1f".join, axis=1)
        self.word = pd.factorize(word_key)[0].astype(np.int64)
        self.lemma = pd.factorize(usages["lemma"].astype(str) + "\x1f" + usages["pos"].astype(str))[0]
        self.sense = pd.factorize(usages["synset"])[0].astype(np.int64)
        if np.any(self.word[self.a] != self.word[self.b]):
            raise ValueError("SeparationDesign: a pair joins usages of different (lemma, POS, form); "
                             "pairs must stay within one word")
        self.same = pairs["same_sense"].to_numpy(bool)
        if np.any(self.same != (self.sense[self.a] == self.sense[self.b])):
            raise ValueError("SeparationDesign: pairs.same_sense disagrees with the usages' synsets; rebuild")
        self.coarse_diff = ~pairs["same_lexname"].to_numpy(bool)
        self.pair_word = self.word[self.a]
        self.n_words = int(self.word.max()) + 1 if n else 0
        self.permutations, self.bootstrap, self.seed = permutations, bootstrap, seed
        rng = np.random.default_rng(seed)
        # Pair -> word indicator (pairs × G), for per-word sums of any pair quantity.
        n_pairs = self.a.size
        self.pair_to_word = sp.csr_matrix((np.ones(n_pairs), (np.arange(n_pairs), self.pair_word)),
                                          shape=(n_pairs, self.n_words))
        self.perm_same = self._permuted_same(rng)
        # Bootstrap: B' resamples of lemmas with replacement, as counts per lemma, then per word and pair.
        n_lemmas = int(self.lemma.max()) + 1 if n else 0
        draws = rng.integers(0, n_lemmas, size=(bootstrap, n_lemmas))
        counts = np.bincount((draws + n_lemmas * np.arange(bootstrap)[:, None]).ravel(),
                             minlength=bootstrap * n_lemmas).reshape(bootstrap, n_lemmas)
        word_lemma = np.zeros(self.n_words, dtype=np.int64)
        word_lemma[self.word] = self.lemma
        self.boot_word_counts = counts[:, word_lemma].astype(np.float64)  # (B', G)

    def _permuted_same(self, rng) -> sp.csr_matrix:
        """(B·G × pairs) 0/1: row b·G + g marks word g's pairs that share a label under permutation b."""
        rows, cols = [], []
        chunk = max(1, 20_000_000 // max(self.a.size, 1))
        for start in range(0, self.permutations, chunk):
            stop = min(start + chunk, self.permutations)
            labels = _within_group_permutations(self.word, self.sense, stop - start, rng)
            bb, pp = np.nonzero(labels[:, self.a] == labels[:, self.b])
            rows.append((bb + start) * self.n_words + self.pair_word[pp])
            cols.append(pp)
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        return sp.csr_matrix((np.ones(rows.size), (rows, cols)),
                             shape=(self.permutations * self.n_words, self.a.size))

    def measure(self, vectors: np.ndarray, *, ari: bool = False, seed: int = 0) -> dict:
        """One layer's sense-separation measures from its preprocessed usage vectors (row i = usage i)."""
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] != self.n:
            raise ValueError(f"measure: vectors have shape {vectors.shape}, expected ({self.n}, d): "
                             "one row per usage, in usage_id order")
        valid = ~np.isnan(vectors).any(axis=1)
        unit = unit_rows(np.where(valid[:, None], vectors, 0.0))
        pair_ok = valid[self.a] & valid[self.b]
        # Rounded to 1e-12: identical vectors then give exactly equal cosines in every word (rounding in
        # the last bit would otherwise break the exact AUROC 0.5 and Δ̄ 0 of the layer-0 control).
        cos = np.round(_pair_cosines(unit, self.a, self.b), 12)
        out = {"n_excluded_nan": int((~valid).sum())}
        out.update(self._delta(cos, pair_ok))
        out.update(self._auroc(cos, pair_ok))
        out.update(self._knn(cos, pair_ok))
        if ari:
            out.update(self._ari(unit, valid, seed))
        return out

    def _word_delta(self, same_sum, same_n, tot_sum, tot_n):
        """Per-word Δ (NaN where a word lacks a kind of pair), for arrays of any leading shape."""
        diff_n = tot_n - same_n
        with np.errstate(invalid="ignore", divide="ignore"):
            d = same_sum / same_n - (tot_sum - same_sum) / diff_n
        return np.where((same_n > 0) & (diff_n > 0), d, np.nan)

    def _delta(self, cos, pair_ok) -> dict:
        c = np.where(pair_ok, cos, 0.0)
        ok = pair_ok.astype(np.float64)
        tot_sum, tot_n = self.pair_to_word.T @ c, self.pair_to_word.T @ ok
        same_ok = ok * self.same
        delta_w = self._word_delta(self.pair_to_word.T @ (c * self.same), self.pair_to_word.T @ same_ok,
                                   tot_sum, tot_n)
        has = ~np.isnan(delta_w)
        if not has.any():  # no word has both kinds of pair: nothing to test
            return {k: np.nan for k in ("delta", "delta_null_mean", "delta_null_sd", "delta_z", "delta_p",
                                        "delta_ci_low", "delta_ci_high")} | {"n_words_delta": 0}
        delta = float(delta_w[has].mean())
        g = self.n_words
        perm_w = self._word_delta((self.perm_same @ c).reshape(-1, g), (self.perm_same @ ok).reshape(-1, g),
                                  tot_sum, tot_n)
        null = np.nanmean(perm_w, axis=1)
        sd = float(null.std(ddof=1)) if self.permutations > 1 else np.nan
        # Bootstrap over lemmas: the resampled mean of Δ_w over words that have it.
        w = self.boot_word_counts * has
        boot = (w @ np.where(has, delta_w, 0.0)) / np.where(w.sum(1) > 0, w.sum(1), np.nan)
        return {
            "delta": delta, "delta_null_mean": float(null.mean()), "delta_null_sd": sd,
            "delta_z": (delta - float(null.mean())) / sd if sd > 0 else np.nan,
            "delta_p": (1 + int(np.sum(null >= delta))) / (self.permutations + 1),
            "n_words_delta": int(has.sum()),
            "delta_ci_low": float(np.nanpercentile(boot, 2.5)), "delta_ci_high": float(np.nanpercentile(boot, 97.5)),
        }

    def _auroc(self, cos, pair_ok) -> dict:
        pos, neg, coarse = pair_ok & self.same, pair_ok & ~self.same, pair_ok & self.coarse_diff

        def auc(p, q):
            if not p.any() or not q.any():
                return np.nan
            keep = p | q
            return float(roc_auc_score(p[keep], cos[keep]))

        low, high = self._auroc_bootstrap(cos, pos, neg)
        return {"auroc": auc(pos, neg), "auroc_coarse": auc(pos, coarse), "n_pairs_same": int(pos.sum()),
                "n_pairs_different": int(neg.sum()), "n_pairs_coarse": int(coarse.sum()),
                "auroc_ci_low": low, "auroc_ci_high": high}

    def _auroc_bootstrap(self, cos, pos, neg) -> tuple[float, float]:
        """95% interval of the pooled AUROC over lemma resamples: a weighted Mann–Whitney count, ties ½.

        Each same-sense pair finds its place among the sorted different-sense cosines once; a resample
        then only needs the cumulative weights of the different-sense pairs (B' × different pairs).
        """
        if not pos.any() or not neg.any():
            return np.nan, np.nan
        order = np.flatnonzero(neg)[np.argsort(cos[neg], kind="stable")]
        diff_cos, diff_word = cos[order], self.pair_word[order]
        pos_cos, pos_word = cos[pos], self.pair_word[pos]
        lo = np.searchsorted(diff_cos, pos_cos, side="left")
        hi = np.searchsorted(diff_cos, pos_cos, side="right")
        values = []
        for start in range(0, self.bootstrap, 50):  # chunks of resamples bound the memory
            counts = self.boot_word_counts[start:start + 50]
            cum = np.zeros((counts.shape[0], diff_cos.size + 1))
            np.cumsum(counts[:, diff_word], axis=1, out=cum[:, 1:])
            below, tied = cum[:, lo], cum[:, hi] - cum[:, lo]
            w_pos = counts[:, pos_word]
            score = np.einsum("bp,bp->b", w_pos, below + 0.5 * tied)
            with np.errstate(invalid="ignore", divide="ignore"):
                values.append(score / (w_pos.sum(1) * cum[:, -1]))
        values = np.concatenate(values)
        return float(np.nanpercentile(values, 2.5)), float(np.nanpercentile(values, 97.5))

    def _knn(self, cos, pair_ok) -> dict:
        a, b = self.a[pair_ok], self.b[pair_ok]
        dist = 1.0 - cos[pair_ok] + _DISTANCE_SHIFT
        rows, cols, dist = np.r_[a, b], np.r_[b, a], np.r_[dist, dist]
        # Each row's entries sorted by distance, then by usage_id: the neighbour search keeps this order
        # (it is already sorted by value), so a tie goes to the smallest usage_id.
        order = np.lexsort((cols, dist, rows))
        indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=self.n))]
        graph = sp.csr_matrix((dist[order], cols[order], indptr), shape=(self.n, self.n))
        has = np.flatnonzero(np.diff(indptr) > 0)
        if has.size == 0:
            return {"knn_accuracy": np.nan, "knn_majority": np.nan, "knn_chance": np.nan, "n_knn": 0}
        nn = NearestNeighbors(n_neighbors=1, metric="precomputed").fit(graph)
        query = graph if has.size == self.n else graph[has]
        neighbour = nn.kneighbors(query, n_neighbors=1, return_distance=False)[:, 0]
        accuracy = float(np.mean(self.sense[neighbour] == self.sense[has]))
        majority, chance = self._baselines(has)
        return {"knn_accuracy": accuracy, "knn_majority": majority, "knn_chance": chance, "n_knn": int(has.size)}

    def _baselines(self, used: np.ndarray) -> tuple[float, float]:
        """Leave-one-out majority sense and exact chance over the usages ``used`` (all usable in their words).

        Majority: the sense most frequent among the word's other usages; a tie goes to the sense whose first
        usage (smallest usage_id in the word) comes first.
        """
        t = pd.DataFrame({"word": self.word[used], "sense": self.sense[used], "id": used})
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

    def _ari(self, unit, valid, seed) -> dict:
        """C5: mean ARI of k-means (K = the word's senses) against the gold senses, over words with ≥ 2
        senses and ≥ 4 usable usages (a k-means fit per word: ~4 ms each)."""
        t = pd.DataFrame({"word": self.word, "sense": self.sense})[valid]
        groups = [g for _, g in t.groupby("word", sort=True) if len(g) >= 4 and g["sense"].nunique() >= 2]
        scores = []
        with threadpool_limits(1):  # a multi-threaded BLAS costs ~10x per tiny k-means fit here
            for g in groups:
                km = KMeans(n_clusters=g["sense"].nunique(), n_init=3, random_state=seed)
                scores.append(adjusted_rand_score(g["sense"].to_numpy(), km.fit_predict(unit[g.index.to_numpy()])))
        return {"ari": float(np.mean(scores)) if scores else np.nan, "n_words_ari": len(scores)}
