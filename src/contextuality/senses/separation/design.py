"""Labelled sense separation on WordNet usages (A1, A2, A3 and C5).

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

The controls, what the cosine adds beyond a pair's shape and beyond layer 0 (the held-out
threshold's balanced accuracy, the shape baselines, the stratified, same-token and per-lemma AUROCs, the paired
difference from layer 0), are measured by ``contextuality.senses.separation.controls`` on the same design.

Every interval is a percentile interval over the same ``bootstrap`` resamples of lemmas (with replacement).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from contextuality.senses.separation.controls import auroc_variants, control_difference, heldout_measures
from contextuality.senses.separation.neighbours import ari_measures, knn_measures
from contextuality.senses.separation.pair_scores import interval, pair_auc
from contextuality.senses.vectors import unit_rows

USAGE_COLUMNS = ["usage_id", "lemma", "pos", "synset", "lexname", "form_lower", "position"]
PAIR_COLUMNS = ["usage_a", "usage_b", "same_sense", "same_lexname"]
# A pair's shape: what a model-free predictor sees (|ΔL|, |Δposition|, |Δ words after the target|, mean length,
# mean position); lengths in spaCy words.
SHAPE_FEATURES = (
    "abs_length_difference",
    "abs_position_difference",
    "abs_tail_difference",
    "mean_length",
    "mean_position",
)
LENGTH_STRATA_CAP = 8  # the strata of |ΔL|: 0, 1, ..., 7, and 8 or more
FOLDS = 5  # GroupKFold by lemma for the held-out threshold and the held-out logistic regressions
RESAMPLE_CHUNK = 50  # lemma resamples handled at once in the bootstrap counts (bounds the memory)


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

    def __init__(
        self,
        usages: pd.DataFrame,
        pairs: pd.DataFrame,
        *,
        permutations: int = 1000,
        bootstrap: int = 200,
        seed: int = 0,
        lengths=None,
        token_keys=None,
        folds: int = FOLDS,
    ):
        """``lengths``: each usage's sentence length in words (the shape measures; None: not measured);
        ``token_keys``: an integer per usage naming its stored unit's token sequence, -1 where unknown (the
        same-token AUROC; None: not measured)."""
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
            raise ValueError(
                "SeparationDesign: a pair joins usages of different (lemma, POS, form); pairs must stay within one word"
            )
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
        self.pair_to_word = sp.csr_matrix(
            (np.ones(n_pairs), (np.arange(n_pairs), self.pair_word)), shape=(n_pairs, self.n_words)
        )
        self.perm_same = self._permuted_same(rng)
        # Bootstrap: B' resamples of lemmas with replacement, as counts per lemma, then per word and pair.
        n_lemmas = int(self.lemma.max()) + 1 if n else 0
        draws = rng.integers(0, n_lemmas, size=(bootstrap, n_lemmas))
        counts = np.bincount(
            (draws + n_lemmas * np.arange(bootstrap)[:, None]).ravel(), minlength=bootstrap * n_lemmas
        ).reshape(bootstrap, n_lemmas)
        word_lemma = np.zeros(self.n_words, dtype=np.int64)
        word_lemma[self.word] = self.lemma
        self.boot_word_counts = counts[:, word_lemma].astype(np.float64)  # (B', G)
        self.boot_lemma_counts = counts.astype(np.float64)  # (B', lemmas)
        self.n_lemmas, self.pair_lemma, self.folds = n_lemmas, self.lemma[self.a], folds
        self.shape, self.length_stratum = self._shape(usages, lengths)
        self.same_token = self._same_token(token_keys)
        # the controls' caches (controls.py): the shape-only AUROC per set of usable pairs, the control's resamples
        self.shape_cache: dict[bytes, dict] = {}
        self.control_cache: dict[str, np.ndarray] = {}

    def _shape(self, usages: pd.DataFrame, lengths) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(pairs × SHAPE_FEATURES) and each pair's |ΔL| stratum, or (None, None) without lengths."""
        if lengths is None:
            return None, None
        lengths = np.asarray(lengths, dtype=np.float64)
        position = usages["position"].to_numpy(np.float64)
        if lengths.shape != (self.n,) or not np.isfinite(lengths).all() or np.any(lengths <= position):
            raise ValueError(
                f"SeparationDesign: lengths must be one finite sentence length per usage ({self.n}), "
                "longer than the usage's position; count the words of each usage's sentence"
            )
        la, lb, pa, pb = lengths[self.a], lengths[self.b], position[self.a], position[self.b]
        shape = np.column_stack(
            [np.abs(la - lb), np.abs(pa - pb), np.abs((la - pa) - (lb - pb)), (la + lb) / 2, (pa + pb) / 2]
        )
        return shape, np.minimum(shape[:, 0], LENGTH_STRATA_CAP).astype(np.int64)

    def _same_token(self, token_keys) -> np.ndarray | None:
        if token_keys is None:
            return None
        keys = np.asarray(token_keys)
        if keys.shape != (self.n,) or not np.issubdtype(keys.dtype, np.integer):
            raise ValueError(
                f"SeparationDesign: token_keys must be one integer per usage ({self.n}), -1 where "
                "unknown; factorize each usage's stored token sequence"
            )
        return (keys[self.a] == keys[self.b]) & (keys[self.a] >= 0)

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
        return sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(self.permutations * self.n_words, self.a.size))

    def measure(
        self, vectors: np.ndarray, *, ari: bool = False, seed: int = 0, control=None, controls: bool = True
    ) -> dict:
        """One layer's sense-separation measures from its preprocessed usage vectors (row i = usage i).

        ``controls=False`` leaves out what the cosine adds beyond the shape and the same-token, stratified and
        per-lemma AUROCs (the job reports them on centred vectors only, for time).

        ``control``: the layer-0 control's pair cosines (``result["cosines"]`` of layer 0), for the paired
        bootstrap of AUROC(ℓ) − AUROC(0). The result holds this layer's own as ``cosines`` (NaN: a pair
        with a missing row).
        """
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] != self.n:
            raise ValueError(
                f"measure: vectors have shape {vectors.shape}, expected ({self.n}, d): "
                "one row per usage, in usage_id order"
            )
        valid = ~np.isnan(vectors).any(axis=1)
        unit = unit_rows(np.where(valid[:, None], vectors, 0.0))
        pair_ok = valid[self.a] & valid[self.b]
        # Rounded to 1e-12: identical vectors then give exactly equal cosines in every word (rounding in
        # the last bit would otherwise break the exact AUROC 0.5 and Δ̄ 0 of the layer-0 control).
        cos = np.round(_pair_cosines(unit, self.a, self.b), 12)
        out = {"n_excluded_nan": int((~valid).sum())}
        out.update(self._delta(cos, pair_ok))
        out.update(self._auroc(cos, pair_ok))
        resamples = out.pop("_auroc_resamples")
        if controls:
            out.update(auroc_variants(self, cos, pair_ok))
            out.update(heldout_measures(self, cos, pair_ok))
        out.update(knn_measures(self, cos, pair_ok))
        if control is not None:
            out.update(control_difference(self, cos, pair_ok, control, resamples))
        if ari:
            out.update(ari_measures(self.word, self.sense, unit, valid, seed))
        out["cosines"] = np.where(pair_ok, cos, np.nan)
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
        delta_w = self._word_delta(self.pair_to_word.T @ (c * self.same), self.pair_to_word.T @ same_ok, tot_sum, tot_n)
        has = ~np.isnan(delta_w)
        if not has.any():  # no word has both kinds of pair: nothing to test
            return {
                k: np.nan
                for k in (
                    "delta",
                    "delta_null_mean",
                    "delta_null_sd",
                    "delta_z",
                    "delta_p",
                    "delta_ci_low",
                    "delta_ci_high",
                )
            } | {"n_words_delta": 0}
        delta = float(delta_w[has].mean())
        g = self.n_words
        perm_w = self._word_delta(
            (self.perm_same @ c).reshape(-1, g), (self.perm_same @ ok).reshape(-1, g), tot_sum, tot_n
        )
        null = np.nanmean(perm_w, axis=1)
        sd = float(null.std(ddof=1)) if self.permutations > 1 else np.nan
        # Bootstrap over lemmas: the resampled mean of Δ_w over words that have it.
        w = self.boot_word_counts * has
        boot = (w @ np.where(has, delta_w, 0.0)) / np.where(w.sum(1) > 0, w.sum(1), np.nan)
        return {
            "delta": delta,
            "delta_null_mean": float(null.mean()),
            "delta_null_sd": sd,
            "delta_z": (delta - float(null.mean())) / sd if sd > 0 else np.nan,
            "delta_p": (1 + int(np.sum(null >= delta))) / (self.permutations + 1),
            "n_words_delta": int(has.sum()),
            "delta_ci_low": float(np.nanpercentile(boot, 2.5)),
            "delta_ci_high": float(np.nanpercentile(boot, 97.5)),
        }

    def _auroc(self, cos, pair_ok) -> dict:
        pos, neg, coarse = pair_ok & self.same, pair_ok & ~self.same, pair_ok & self.coarse_diff
        resamples = self.auc_resamples(cos, pos, neg)
        low, high = interval(resamples)
        coarse_low, coarse_high = interval(self.auc_resamples(cos, pos, coarse))
        return {
            "auroc": pair_auc(cos, pos, neg),
            "auroc_coarse": pair_auc(cos, pos, coarse),
            "n_pairs_same": int(pos.sum()),
            "n_pairs_different": int(neg.sum()),
            "n_pairs_coarse": int(coarse.sum()),
            "auroc_ci_low": low,
            "auroc_ci_high": high,
            "auroc_coarse_ci_low": coarse_low,
            "auroc_coarse_ci_high": coarse_high,
            "_auroc_resamples": (pair_ok, resamples),
        }

    def _auc_counts(self, score, pos, neg) -> tuple[np.ndarray, np.ndarray]:
        """Per lemma resample: the weighted Mann–Whitney count (ties ½) and its denominator Σw_p·Σw_n.

        Each positive pair finds its place among the sorted negative scores once; a resample then only needs
        the cumulative weights of the negative pairs (B' × negative pairs, in chunks of resamples).
        """
        if not pos.any() or not neg.any():
            return np.zeros(self.bootstrap), np.zeros(self.bootstrap)
        order = np.flatnonzero(neg)[np.argsort(score[neg], kind="stable")]
        diff_score, diff_word = score[order], self.pair_word[order]
        pos_score, pos_word = score[pos], self.pair_word[pos]
        lo = np.searchsorted(diff_score, pos_score, side="left")
        hi = np.searchsorted(diff_score, pos_score, side="right")
        counts_out, totals = [], []
        for start in range(0, self.bootstrap, RESAMPLE_CHUNK):
            counts = self.boot_word_counts[start : start + RESAMPLE_CHUNK]
            cum = np.zeros((counts.shape[0], diff_score.size + 1))
            np.cumsum(counts[:, diff_word], axis=1, out=cum[:, 1:])
            below, tied = cum[:, lo], cum[:, hi] - cum[:, lo]
            w_pos = counts[:, pos_word]
            counts_out.append(np.einsum("bp,bp->b", w_pos, below + 0.5 * tied))
            totals.append(w_pos.sum(1) * cum[:, -1])
        return np.concatenate(counts_out), np.concatenate(totals)

    def auc_resamples(self, score, pos, neg, strata=None) -> np.ndarray:
        """The AUROC in each lemma resample (B',); with ``strata``, pairs are compared within a stratum only."""
        if strata is None:
            count, total = self._auc_counts(score, pos, neg)
        else:
            count, total = np.zeros(self.bootstrap), np.zeros(self.bootstrap)
            for stratum in np.unique(strata[pos | neg]):
                inside = strata == stratum
                c, t = self._auc_counts(score, pos & inside, neg & inside)
                count, total = count + c, total + t
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, count / np.where(total > 0, total, 1.0), np.nan)
