"""W3b's real-sense positive control and the power of its test, beside the pseudo-word control.

The pseudo-word control (``sts.clusters.pseudo_word_pairs``) joins two different words: it shows that the cluster index
sees word-sized splits, not sense-sized ones. Here the split is two senses of one lemma:

* ``two_sense_sets``: for each (lemma, POS, stored token sequence) of the WordNet usages with two or more senses
  that each have ``PER_SENSE`` stored usages or more, the usages of its two largest senses (the same input token,
  so only the context differs).
* ``delta_cluster_index_two_senses``: each set's cluster index (R seeded subsamples of ``PER_SENSE`` usages of each
  sense, ``clusters``' statistic) minus the matched monosemous STS words' at the same subsample size m = 2 ×
  ``PER_SENSE`` (the statistic drifts with m), with the interval and Mann-Whitney p of ``sts.clusters.cluster_contrast``.
  WordNet's synsets have few examples each (a median of one), so m is small here, and the two groups' sentences
  come from different corpora (WordNet's examples, STS): the note says so.
* ``w3b_detectable_split_share``: the power of the poly - mono test, at that m on the same matched words. A share
  s of the polysemous words' cluster indices is replaced by two-senses sets' (drawn with replacement; seeded, the
  same draws at every s); the smallest s on a 1% grid at which the two-sided Mann-Whitney test rejects at
  ``SPLIT_ALPHA`` with the polysemous group more clusterable, in at least half of ``POWER_DRAWS`` draws. NaN: not
  reached even with every polysemous word split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from contextuality.senses.rows import Rows
from contextuality.senses.sts import clusters

PER_SENSE = 3  # usages of each sense in a subsample: 42 lemmas of the default run's usages have two senses with 3+
SPLIT_ALPHA = 0.05  # the claims' alpha (report.senses.ALPHA), at which W3b's Mann-Whitney test is read
POWER_DRAWS = 50  # seeded draws of the replaced words per share
SHARE_GRID = np.arange(1, 101) / 100.0


def two_sense_sets(
    usages: pd.DataFrame, usage_rows: np.ndarray, token_keys: np.ndarray, per_sense: int = PER_SENSE
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(key, usages of sense a, usages of sense b) for each (lemma, POS, stored token sequence) with two senses of at
    least ``per_sense`` stored usages each: its two largest senses (ties by synset name), in key order."""
    t = usages.assign(token=np.asarray(token_keys), usage=np.arange(len(usages)))
    t = t[(np.asarray(usage_rows) >= 0) & (t["token"] >= 0)]
    t = t.assign(key=t["lemma"].astype(str) + "|" + t["pos"].astype(str) + "|" + t["token"].astype(str))
    size = t.groupby(["key", "synset"])["usage"].transform("size")
    t = t[size >= per_sense].assign(size=size[size >= per_sense])
    sets = []
    for key, group in t.sort_values(["key", "size", "synset"], ascending=[True, False, True]).groupby("key", sort=True):
        senses = group["synset"].drop_duplicates().to_numpy()
        if senses.size >= 2:
            by = group.groupby("synset")["usage"]
            sets.append((key, np.sort(by.get_group(senses[0]).to_numpy()), np.sort(by.get_group(senses[1]).to_numpy())))
    return sets


def _mean_per_item(scores: np.ndarray, items: int, subsamples: int, seed: int) -> np.ndarray:
    """The mean cluster index of each item's R subsamples (stacked item by item), all clustered in one batch."""
    return np.nanmean(clusters.batched_cluster_index(scores, seed).reshape(items, subsamples), axis=1)


def small_cluster_indices(
    points: list[np.ndarray], seeds: list[int], *, subsamples: int, components: int
) -> np.ndarray:
    """Each word's mean cluster index over R seeded subsamples of m = 2 × ``PER_SENSE`` of its rows (the two-senses
    scale; q at most m − 1, the rank of m centred points)."""
    m = 2 * PER_SENSE
    if not points:
        return np.zeros(0)
    scores = [clusters.subsample_scores(x, m, subsamples, min(components, m - 1), s) for x, s in zip(points, seeds)]
    return _mean_per_item(np.concatenate(scores), len(points), subsamples, seeds[0])


def two_senses_cluster_indices(vectors: np.ndarray, sets, *, subsamples: int, components: int, seed: int) -> np.ndarray:
    """Each set's mean cluster index over R seeded subsamples of ``PER_SENSE`` usages of each of its two senses."""
    if not sets:
        return np.zeros(0)
    rng = np.random.default_rng([seed, 43])
    drawn = [
        np.concatenate([rng.choice(a, PER_SENSE, replace=False), rng.choice(b, PER_SENSE, replace=False)])
        for _, a, b in sets
        for _ in range(subsamples)
    ]
    scores = clusters.principal_scores(vectors[np.stack(drawn)], min(components, 2 * PER_SENSE - 1))
    return _mean_per_item(scores, len(sets), subsamples, seed)


def detectable_split_share(poly, mono, split, *, seed: int, alpha: float = SPLIT_ALPHA, draws: int = POWER_DRAWS):
    """The smallest share s of ``SHARE_GRID`` at which replacing s of the polysemous words' cluster indices by
    two-senses sets' makes the two-sided Mann-Whitney test reject (poly more clusterable) in half the draws or more;
    NaN if no share does. Every share uses the same draws (which words, which replacements), so the power rises
    with s only through s."""
    poly, mono, split = (np.asarray(v, dtype=np.float64) for v in (poly, mono, split))
    poly, mono, split = poly[np.isfinite(poly)], mono[np.isfinite(mono)], split[np.isfinite(split)]
    if poly.size < 2 or mono.size < 2 or split.size < 1:
        return np.nan
    rng = np.random.default_rng([seed, 17])
    order = rng.random((draws, poly.size)).argsort(axis=1).argsort(axis=1)  # each word's place in a draw's order
    replacement = split[rng.integers(0, split.size, (draws, poly.size))]
    replaced = order[None] < np.rint(SHARE_GRID * poly.size)[:, None, None]  # (shares, draws, words)
    mixed = np.where(replaced, replacement[None], poly[None, None])
    p = stats.mannwhitneyu(mixed, mono, alternative="two-sided", axis=-1).pvalue
    power = ((p < alpha) & (mixed.mean(-1) < mono.mean())).mean(axis=1)
    reached = np.flatnonzero(power >= 0.5)
    return float(SHARE_GRID[reached[0]]) if reached.size else np.nan


@dataclass
class SplitControl:
    """The two-senses sets of a model's usages and, per layer, the matched STS words' cluster indices at the
    two-senses scale (``reference[kind]``: poly, mono), which ``clusterability_rows`` fills before
    ``separation.rows`` adds the control's rows from the usages' vectors of the same layer."""

    sets: list
    subsamples: int
    components: int
    seed: int
    reference: dict = field(default_factory=dict)

    def measure_reference(self, kind: str, vectors: dict, group: pd.Series, seeds: dict) -> None:
        """The matched words' cluster indices at m = 2 × ``PER_SENSE`` (vectors and seeds by word; group: poly or mono)."""
        shape = dict(subsamples=self.subsamples, components=self.components)
        enough = [w for w in group.index if len(vectors[w]) >= 2 * PER_SENSE]
        self.reference[kind] = {
            name: small_cluster_indices(
                [vectors[w] for w in enough if group[w] == name],
                [seeds[w] for w in enough if group[w] == name],
                **shape,
            )
            for name in ("poly", "mono")
        }

    def add_rows(self, rows: Rows, kind: str, vectors: np.ndarray) -> None:
        """``delta_cluster_index_two_senses`` and ``w3b_detectable_split_share`` of this layer (usage vectors: one row
        per usage, NaN where not stored)."""
        reference = self.reference.get(kind, {"poly": np.zeros(0), "mono": np.zeros(0)})
        poly, mono = reference["poly"], reference["mono"]
        split = two_senses_cluster_indices(
            vectors, self.sets, subsamples=self.subsamples, components=self.components, seed=self.seed
        )
        m = 2 * PER_SENSE
        where = (
            f"m = {m} ({PER_SENSE} usages of each sense; WordNet's synsets have few examples), the monosemous words "
            f"at the same m on their STS occurrences (different corpora: WordNet's example sentences against STS)"
        )
        row, contrast = clusters.contrast_row(split, mono)
        rows.add(
            "clusterability",
            "delta_cluster_index_two_senses",
            kind,
            **row,
            n=contrast["n_poly"] + contrast["n_mono"],
            note=f"positive control with real senses: {contrast['n_poly']} lemmas' two largest senses of one stored "
            f"token, balanced subsamples, minus the monosemous words; {where}; two-sided Mann-Whitney p",
        )
        rows.add(
            "clusterability",
            "w3b_detectable_split_share",
            kind,
            detectable_split_share(poly, mono, split, seed=self.seed),
            n=int(np.isfinite(poly).sum() + np.isfinite(mono).sum()),
            note=f"the smallest share of the {int(np.isfinite(poly).sum())} polysemous words with a real two-sense "
            f"split (their cluster index replaced by a two-senses set's) at which poly - mono rejects at alpha "
            f"{SPLIT_ALPHA:g} in half of {POWER_DRAWS} seeded draws; {where}; NaN: not even at 100%",
        )
