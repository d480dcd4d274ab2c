"""P1: polysemy against context variety (the paper's own reading, §4.2).

``polysemy_regression`` fits OLS with HC3 standard errors of a word's self-similarity on log synsets, log
occurrences, context diversity and POS dummies (reference: n), every continuous variable z-scored so the
betas are standardised. The paper's reading ("the variety of contexts ... rather than its polysemy")
predicts β(log_synsets) ≈ 0 once context_diversity is in; "one cluster per sense" predicts β < 0.
``polysemy_without_diversity`` drops context_diversity, to see what polysemy explains without it;
``mono_poly_check`` is the robustness check: frequency-matched mono vs poly words, Mann–Whitney.
``covariates`` adds further continuous terms: the full version (W4) adds general English frequency
(wordfreq's Zipf) and the word's length in characters, since frequency drives both polysemy and cosine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.api as sm

from contextuality.senses.sts.clusters import cluster_contrast, matched_mono_poly

POS_LEVELS = ("n", "v", "a", "r")
RESULT_COLUMNS = ["term", "beta", "se", "ci_low", "ci_high", "p", "n_words", "r2"]


def _design(
    table: pd.DataFrame, y: str, diversity: bool, covariates: tuple[str, ...] = ()
) -> tuple[pd.Series, pd.DataFrame]:
    """The z-scored response and design (const, continuous terms z-scored, POS dummies 0/1)."""
    needed = ["word", y, "n_synsets", "n", "pos"] + (["context_diversity"] if diversity else []) + list(covariates)
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"polysemy_regression: table lacks {missing}; it needs {needed}")
    t = table[needed].dropna()
    bad = sorted(set(t["pos"]) - set(POS_LEVELS))
    if bad:
        raise ValueError(
            f"polysemy_regression: pos has values {bad}; allowed {list(POS_LEVELS)} "
            "(map satellite adjectives 's' to 'a')"
        )
    if (t["n_synsets"] < 1).any() or (t["n"] < 1).any():
        raise ValueError(
            "polysemy_regression: n_synsets and n must be ≥ 1 (their logs are regressors); "
            "drop words outside WordNet or without occurrences"
        )
    x = pd.DataFrame(
        {"log_synsets": np.log(t["n_synsets"].to_numpy(np.float64)), "log_n": np.log(t["n"].to_numpy(np.float64))},
        index=t.index,
    )
    if diversity:
        x["context_diversity"] = t["context_diversity"].astype(np.float64)
    for covariate in covariates:
        x[covariate] = t[covariate].astype(np.float64)
    present = [p for p in POS_LEVELS if (t["pos"] == p).any()]
    for level in present[1:]:  # the first present level (n when there are nouns) is the reference
        x[f"pos_{level}"] = (t["pos"] == level).astype(np.float64)
    response = t[y].astype(np.float64)
    for name, col in [(y, response), *x.items()]:
        if col.std(ddof=1) == 0 or not np.isfinite(col.std(ddof=1)):
            raise ValueError(
                f"polysemy_regression: column {name!r} is constant over the {len(t)} words; "
                "drop it or widen the word set"
            )
    continuous = [c for c in x.columns if not c.startswith("pos_")]
    x[continuous] = (x[continuous] - x[continuous].mean()) / x[continuous].std(ddof=1)
    x.insert(0, "const", 1.0)
    _refuse_collinear(x)
    return (response - response.mean()) / response.std(ddof=1), x


def _refuse_collinear(x: pd.DataFrame) -> None:
    """Refuse a design column that is (numerically) a linear combination of the columns before it."""
    values = x.to_numpy()
    if np.linalg.matrix_rank(values) == values.shape[1]:  # full rank: one decomposition, none per column
        return
    for k in range(1, values.shape[1]):
        if np.linalg.matrix_rank(values[:, : k + 1]) <= k:
            raise ValueError(
                f"polysemy_regression: column {x.columns[k]!r} is collinear with "
                f"{list(x.columns[:k])}; drop one of them"
            )


def polysemy_regression(
    table: pd.DataFrame, *, y: str = "self_similarity", diversity: bool = True, covariates: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Standardised OLS betas (HC3) of y on log_synsets, log_n, context_diversity, the ``covariates`` (columns of
    ``table``, z-scored) and POS, one row per term.

    Columns: term, beta, se, ci_low, ci_high (95%), p, n_words, r2. Rows with a missing value are dropped.
    """
    response, x = _design(table, y, diversity, tuple(covariates))
    if len(x) <= x.shape[1]:
        raise ValueError(f"polysemy_regression: {len(x)} words for {x.shape[1]} coefficients; widen the word set")
    fit = sm.OLS(response, x).fit(cov_type="HC3")
    ci = fit.conf_int(alpha=0.05)
    return pd.DataFrame(
        {
            "term": x.columns,
            "beta": fit.params.to_numpy(),
            "se": fit.bse.to_numpy(),
            "ci_low": ci[0].to_numpy(),
            "ci_high": ci[1].to_numpy(),
            "p": fit.pvalues.to_numpy(),
            "n_words": len(x),
            "r2": float(fit.rsquared),
        }
    )[RESULT_COLUMNS]


def polysemy_without_diversity(table: pd.DataFrame, *, y: str = "self_similarity") -> pd.DataFrame:
    """``polysemy_regression`` without context_diversity: what polysemy explains when context variety is out."""
    return polysemy_regression(table, y=y, diversity=False)


def mono_poly_check(table: pd.DataFrame, *, y: str = "self_similarity", per_group: int = 200, seed: int = 0) -> dict:
    """Frequency-matched monosemous vs polysemous words' y: mean difference (poly − mono), its 95% bootstrap
    interval, two-sided Mann–Whitney p and counts. ``polysemy`` is taken from n_synsets (1: mono) if absent."""
    t = table.dropna(subset=[y, "n", "n_synsets"])
    if "polysemy" not in t.columns:
        t = t.assign(polysemy=np.where(t["n_synsets"] == 1, "mono", "poly"))
    matched = matched_mono_poly(t, per_group=per_group, seed=seed)
    r = cluster_contrast(
        matched.loc[matched["polysemy"] == "poly", y], matched.loc[matched["polysemy"] == "mono", y], seed=seed
    )
    return {
        "delta": r["delta_ci"],
        "ci_low": r["ci_low"],
        "ci_high": r["ci_high"],
        "mw_p": r["mw_p"],
        "n_poly": r["n_poly"],
        "n_mono": r["n_mono"],
    }
