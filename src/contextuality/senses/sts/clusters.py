"""Clusterability of a word's occurrences (C1 cluster index, C2 Gaussian null, C3 mono/poly).

* C1 ``cluster_index``: SigClust's CI = W₂/W₁ of the best 2-means split of centred points (small = clusterable).
* ``word_cluster_index``: the mean CI over R fixed, seeded subsamples of m occurrences, each centred and
  projected on its top q principal components (a fixed m: every clusterability statistic drifts with n).
* C2 ``gaussian_null_p``: p of the CI against Gaussians with the subsample's covariance (conservative).
* C3 ``matched_mono_poly`` and ``cluster_contrast``: frequency-matched monosemous and polysemous words (matched on
  the STS count and, given a ``zipf`` column, on general English frequency too), and the difference of their mean CIs
  (``contrast_row``: that difference as a row of the long table).
* The positive control (can the statistic see two senses at all?): ``pseudo_word_pairs`` joins monosemous
  words two by two, at random, into pseudo-words with two senses by construction, and
  ``pseudo_word_cluster_index`` gives a pseudo-word the same statistic (R subsamples of m rows, half from each
  word). If the statistic can see two senses as clusters at all, pseudo-words are more clusterable than their
  monosemous parts: "poly no more clusterable than mono" then means "senses not detected as clusters", not "the
  test cannot see clusters".

Speed: scikit-learn's ``KMeans`` costs ~4 ms per fit on 20 × 5 points (BLAS at 1 thread; ~37 ms with the
default thread pool on this machine), so ~1,000 fits per (layer, preprocessing) would take 4 s. The words'
subsamples and null draws are therefore clustered by ``batched_cluster_index``, Lloyd's algorithm on a
whole stack at once (k-means++ starts, the best of ``n_init``), checked against ``cluster_index`` in the tests.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits


def cluster_index(y: np.ndarray, seed: int = 0, *, n_init: int = 10) -> float:
    """CI = W₂/W₁ of the points y after centring, with scikit-learn's 2-means (NaN if all points coincide)."""
    y = np.asarray(y, dtype=np.float64)
    y = y - y.mean(axis=0)
    w1 = float((y**2).sum())
    if w1 == 0:
        return np.nan
    with threadpool_limits(1):
        km = KMeans(n_clusters=2, n_init=n_init, random_state=seed).fit(y)
    return float(km.inertia_) / w1


def batched_cluster_index(ys: np.ndarray, seed: int = 0, *, n_init: int = 10, max_iter: int = 100) -> np.ndarray:
    """CI of each point set of a stack (S, m, q), each centred: the best of n_init 2-means runs (Lloyd)."""
    ys = np.asarray(ys, dtype=np.float64)
    ys = ys - ys.mean(axis=1, keepdims=True)
    s, m, _ = ys.shape
    w1 = (ys**2).sum(axis=(1, 2))
    rng = np.random.default_rng(seed)
    y = np.repeat(ys, n_init, axis=0)  # (S·n_init, m, q): every start a row of the batch
    rows = np.arange(y.shape[0])
    # k-means++ for K = 2: one point at random, the other drawn in proportion to its squared distance.
    first = y[rows, rng.integers(0, m, rows.size)]
    d2 = ((y - first[:, None]) ** 2).sum(-1)
    cum = np.cumsum(d2, axis=1)
    pick = (cum < rng.random(rows.size)[:, None] * cum[:, -1:]).sum(1).clip(max=m - 1)
    centres = np.stack([first, y[rows, pick]], axis=1)  # (S·n_init, 2, q)
    assign = np.zeros((rows.size, m), dtype=bool)
    for it in range(max_iter):
        dist = ((y[:, :, None, :] - centres[:, None]) ** 2).sum(-1)  # (·, m, 2)
        new = dist[..., 1] < dist[..., 0]
        if it and np.array_equal(new, assign):
            break
        assign = new
        n1 = assign.sum(1)
        n0 = m - n1
        c1 = np.einsum("bm,bmq->bq", assign, y) / np.maximum(n1, 1)[:, None]
        c0 = np.einsum("bm,bmq->bq", ~assign, y) / np.maximum(n0, 1)[:, None]
        # An emptied cluster keeps its old centre (Lloyd's usual rule).
        centres = np.stack(
            [np.where(n0[:, None] > 0, c0, centres[:, 0]), np.where(n1[:, None] > 0, c1, centres[:, 1])], axis=1
        )
    dist = ((y[:, :, None, :] - centres[:, None]) ** 2).sum(-1)
    w2 = dist.min(-1).sum(-1).reshape(s, n_init).min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(w1 > 0, w2 / w1, np.nan)


def _check_rows(x: np.ndarray, m: int, components: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < m:
        raise ValueError(
            f"clusters: a word has {x.shape[0] if x.ndim == 2 else x.shape} rows, fewer than "
            f"m = {m}; keep words with at least m usable occurrences"
        )
    if components > min(m, x.shape[1]):
        raise ValueError(f"clusters: components = {components} exceeds min(m, d) = {min(m, x.shape[1])}; lower it")
    return x


def subsample_scores(x: np.ndarray, m: int, subsamples: int, components: int, seed: int) -> np.ndarray:
    """(R, m, q): R seeded subsamples of m rows, each centred and written on its top q principal axes."""
    x = _check_rows(x, m, components)
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.choice(x.shape[0], size=m, replace=False) for _ in range(subsamples)])
    return principal_scores(x[idx], components)


def principal_scores(y: np.ndarray, components: int) -> np.ndarray:
    """(R, m, q): each of R point sets (R, m, d) centred and written on its top q principal axes."""
    y = y - y.mean(axis=1, keepdims=True)
    # Scores from the m × m Gram matrix: U·s = eigenvectors · √eigenvalues. A batched SVD of (R, m, d) is
    # far slower here (230 ms against 1 ms with a multi-threaded BLAS).
    vals, vecs = np.linalg.eigh(y @ y.transpose(0, 2, 1))
    top = slice(-1, -components - 1, -1)
    return vecs[..., top] * np.sqrt(np.clip(vals[:, top], 0.0, None))[:, None, :]


def word_cluster_index(
    x: np.ndarray, *, m: int = 20, subsamples: int = 5, components: int = 5, seed: int, n_init: int = 10
) -> float:
    """Mean CI over R seeded subsamples of m rows of x (pass a seed derived from the word: same rows per layer)."""
    scores = subsample_scores(x, m, subsamples, components, seed)
    return float(np.nanmean(batched_cluster_index(scores, seed, n_init=n_init)))


def pseudo_word_scores(
    xa: np.ndarray, xb: np.ndarray, *, m: int, subsamples: int, components: int, seed: int
) -> np.ndarray:
    """(R, m, q): R seeded subsamples of a pseudo-word, ⌈m/2⌉ rows of word a and ⌊m/2⌋ of word b, each centred
    and written on its top q principal axes."""
    half = (m + 1) // 2
    xa, xb = _check_rows(xa, half, min(components, half)), _check_rows(xb, m - half, min(components, m - half))
    if components > min(m, xa.shape[1]):
        raise ValueError(f"clusters: components = {components} exceeds min(m, d) = {min(m, xa.shape[1])}; lower it")
    rng = np.random.default_rng(seed)
    y = np.stack(
        [
            np.concatenate(
                [
                    xa[rng.choice(xa.shape[0], size=half, replace=False)],
                    xb[rng.choice(xb.shape[0], size=m - half, replace=False)],
                ]
            )
            for _ in range(subsamples)
        ]
    )
    return principal_scores(y, components)


def pseudo_word_cluster_index(
    xa: np.ndarray,
    xb: np.ndarray,
    *,
    m: int = 20,
    subsamples: int = 5,
    components: int = 5,
    seed: int,
    n_init: int = 10,
) -> float:
    """The positive control's CI: the mean CI over R subsamples of m rows, half from each of two words."""
    scores = pseudo_word_scores(xa, xb, m=m, subsamples=subsamples, components=components, seed=seed)
    return float(np.nanmean(batched_cluster_index(scores, seed, n_init=n_init)))


def pseudo_word_pairs(words, *, seed: int) -> list[tuple[str, str]]:
    """Monosemous words joined two by two into pseudo-words: a seeded shuffle, then consecutive pairs (an odd
    word out is left out), so that the two parts of a pseudo-word are unrelated."""
    words = sorted(words)
    order = np.random.default_rng(seed).permutation(len(words))
    shuffled = [words[i] for i in order]
    return [(shuffled[i], shuffled[i + 1]) for i in range(0, len(shuffled) - 1, 2)]


def _gaussian_null(y: np.ndarray, ci: float, *, m: int, components: int, draws: int, seed: int, n_init: int) -> float:
    sd = np.sqrt((y**2).sum(axis=0) / (m - 1))
    null = np.random.default_rng([seed, 1]).standard_normal((draws, m, components)) * sd
    null_ci = batched_cluster_index(null, seed + 1, n_init=n_init)
    return (1 + int(np.sum(null_ci <= ci))) / (draws + 1)


def gaussian_null_p(
    x: np.ndarray, *, m: int = 20, components: int = 5, draws: int = 50, seed: int, n_init: int = 10
) -> float:
    """C2: p = (1 + #{CI* ≤ CI})/(B + 1), CI* of B Gaussian samples of m points with the subsample's covariance.

    The subsample is word_cluster_index's first one (same seed); its scores on its principal axes have the
    diagonal covariance s²/(m − 1), so the null draws are independent normals with those variances.
    """
    y = subsample_scores(x, m, 1, components, seed)[0]
    ci = batched_cluster_index(y[None], seed, n_init=n_init)[0]
    return _gaussian_null(y, ci, m=m, components=components, draws=draws, seed=seed, n_init=n_init)


def matched_mono_poly(
    table: pd.DataFrame, *, per_group: int, seed: int, bins: int = 8, by: tuple[str, ...] = ("n",)
) -> pd.DataFrame:
    """Frequency-matched monosemous and polysemous words: equal counts per cell, at most per_group each.

    A cell is one bin of each covariate of ``by`` (``n``: log n, the STS count; any other column, e.g. ``zipf``:
    its value); each covariate gets ``bins`` quantile bins over both groups (with two covariates, pass fewer:
    4 gives 4 × 4 cells). Returns the chosen rows of ``table`` with a ``bin`` column (the cell).
    """
    needed = ["word", "n", "polysemy", "n_synsets", *[c for c in by if c != "n"]]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"matched_mono_poly: table lacks {missing}; it needs {needed}")
    bad = set(table["polysemy"]) - {"mono", "poly"}
    if bad:
        raise ValueError(f"matched_mono_poly: polysemy has values {sorted(bad)}; allowed: 'mono', 'poly'")
    t = table.reset_index(drop=True)
    cell = np.zeros(len(t), dtype=np.int64)
    for covariate in by:
        values = np.log(t["n"].to_numpy(np.float64)) if covariate == "n" else t[covariate].to_numpy(np.float64)
        if not np.isfinite(values).all():
            raise ValueError(
                f"matched_mono_poly: column {covariate!r} has missing or infinite values; fill or drop those words"
            )
        edges = np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)))
        index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, max(len(edges) - 2, 0))
        cell = cell * bins + index
    t = t.assign(bin=cell)
    counts = t.groupby(["bin", "polysemy"]).size().unstack(fill_value=0).reindex(columns=["mono", "poly"], fill_value=0)
    take = counts.min(axis=1).to_numpy(np.float64)
    if take.sum() > per_group:  # scale every bin down alike, keeping the frequency profile
        take = np.floor(take * per_group / take.sum())
    rng = np.random.default_rng(seed)
    chosen = []
    for b, k in zip(counts.index, take.astype(int)):
        for group in ("mono", "poly"):
            rows = np.flatnonzero((t["bin"] == b).to_numpy() & (t["polysemy"] == group).to_numpy())
            chosen.append(rng.choice(rows, size=k, replace=False))
    return t.iloc[np.sort(np.concatenate(chosen))].reset_index(drop=True)


def cluster_contrast(ci_poly, ci_mono, *, seed: int = 0, resamples: int = 2000) -> dict:
    """C3: mean CI of polysemous minus monosemous words (negative: polysemous more clusterable), 95% bootstrap
    interval, two-sided Mann–Whitney p, and the counts (NaN CIs dropped)."""
    poly = np.asarray(ci_poly, dtype=np.float64)
    mono = np.asarray(ci_mono, dtype=np.float64)
    poly, mono = poly[~np.isnan(poly)], mono[~np.isnan(mono)]
    out = {
        "delta_ci": np.nan,
        "ci_low": np.nan,
        "ci_high": np.nan,
        "mw_p": np.nan,
        "n_poly": int(poly.size),
        "n_mono": int(mono.size),
    }
    if poly.size < 2 or mono.size < 2:
        return out
    boot = stats.bootstrap(
        (poly, mono),
        lambda p, q, axis: p.mean(axis) - q.mean(axis),
        n_resamples=resamples,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    out.update(
        delta_ci=float(poly.mean() - mono.mean()),
        ci_low=float(boot.confidence_interval.low),
        ci_high=float(boot.confidence_interval.high),
        mw_p=float(stats.mannwhitneyu(poly, mono, alternative="two-sided").pvalue),
    )
    return out


def contrast_row(ci_poly, ci_mono) -> tuple[dict, dict]:
    """``cluster_contrast(ci_poly, ci_mono)`` as a long-table row's value against 0, its interval and the two-sided
    Mann-Whitney p (``rows.Rows.add``'s keywords), and the contrast itself (its counts)."""
    contrast = cluster_contrast(ci_poly, ci_mono)
    row = {
        "value": contrast["delta_ci"],
        "null": 0.0,
        "ci": (contrast["ci_low"], contrast["ci_high"]),
        "p": contrast["mw_p"],
    }
    return row, contrast
