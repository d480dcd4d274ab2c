"""P1 polysemy regression (standardised OLS with HC3 errors) and the mono/poly check, against known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contextuality.senses.sts.polysemy import mono_poly_check, polysemy_regression, polysemy_without_diversity


def synthetic(n=600, seed=0, beta=(-0.05, -0.08, -0.3)):
    """Words whose self-similarity is linear in log synsets, log n and context diversity, plus a verb shift."""
    rng = np.random.default_rng(seed)
    log_n = rng.normal(3.5, 1.0, n)
    n_synsets = np.maximum(1, np.round(np.exp(0.3 * log_n + rng.normal(0.5, 0.8, n)))).astype(int)
    cd = 0.5 + 0.05 * log_n + rng.normal(0, 0.1, n)
    pos = rng.choice(list("nvar"), n, p=[0.5, 0.25, 0.15, 0.1])
    y = 0.6 + beta[0] * np.log(n_synsets) + beta[1] * log_n + beta[2] * cd + 0.05 * (pos == "v")
    y = y + rng.normal(0, 0.05, n)
    return pd.DataFrame(
        {
            "word": [f"w{i}" for i in range(n)],
            "self_similarity": y,
            "n_synsets": n_synsets,
            "n": np.exp(log_n).round().astype(int) + 1,
            "context_diversity": cd,
            "pos": pos,
        }
    )


def z(v):
    return (v - v.mean()) / v.std(ddof=1)


def zdesign(t, diversity=True):
    cols = [np.ones(len(t)), z(np.log(t["n_synsets"].to_numpy(float))), z(np.log(t["n"].to_numpy(float)))]
    if diversity:
        cols.append(z(t["context_diversity"].to_numpy()))
    cols += [(t["pos"] == p).to_numpy(float) for p in "var"]
    return np.column_stack(cols), z(t["self_similarity"].to_numpy())


def test_betas_equal_least_squares_and_cover_the_truth():
    beta = (-0.05, -0.08, -0.3)
    t = synthetic(beta=beta)
    r = polysemy_regression(t).set_index("term")
    x, y = zdesign(t)
    np.testing.assert_allclose(r["beta"].to_numpy(), np.linalg.lstsq(x, y, rcond=None)[0], atol=1e-10)
    assert list(r.index) == ["const", "log_synsets", "log_n", "context_diversity", "pos_v", "pos_a", "pos_r"]
    # The true standardised betas: raw coefficient × sd(regressor) / sd(response), on this sample.
    sd_y = t["self_similarity"].std(ddof=1)
    for term, b, v in zip(
        ["log_synsets", "log_n", "context_diversity"],
        beta,
        [np.log(t["n_synsets"]), np.log(t["n"] - 1), t["context_diversity"]],
    ):
        true = b * v.std(ddof=1) / sd_y
        assert r.loc[term, "ci_low"] < true < r.loc[term, "ci_high"], term
    assert r["n_words"].iloc[0] == len(t) and 0 < r["r2"].iloc[0] < 1
    without = polysemy_without_diversity(t).set_index("term")
    assert "context_diversity" not in without.index
    np.testing.assert_allclose(
        without["beta"].to_numpy(), np.linalg.lstsq(*zdesign(t, False), rcond=None)[0], atol=1e-10
    )


def test_hc3_errors_equal_the_textbook_formula():
    t = synthetic(n=14, seed=3)
    r = polysemy_regression(t)
    x, y = zdesign(t)
    x = x[:, [c for c in range(x.shape[1]) if x[:, c].any()]]  # a POS level absent from 14 words has no dummy
    bread = np.linalg.inv(x.T @ x)
    e = y - x @ (bread @ x.T @ y)
    h = np.einsum("ij,jk,ik->i", x, bread, x)
    cov = bread @ (x.T * (e / (1 - h)) ** 2) @ x @ bread
    np.testing.assert_allclose(r["se"].to_numpy(), np.sqrt(np.diag(cov)), rtol=1e-10)


def test_constant_or_collinear_columns_are_refused():
    t = synthetic(n=50)
    with pytest.raises(ValueError, match="'log_synsets' is constant"):
        polysemy_regression(t.assign(n_synsets=3))
    with pytest.raises(ValueError, match="'context_diversity' is collinear"):
        polysemy_regression(t.assign(context_diversity=2 * np.log(t["n"]) + 1))
    with pytest.raises(ValueError, match="pos has values"):
        polysemy_regression(t.assign(pos="s"))


def test_mono_poly_check():
    t = synthetic(n=800, seed=5)
    t["self_similarity"] -= 0.1 * (t["n_synsets"] > 1)  # polysemous words less self-similar, by 0.1
    r = mono_poly_check(t, per_group=150)
    assert r["n_mono"] == r["n_poly"] > 20
    assert r["ci_low"] < r["delta"] < r["ci_high"] < 0 and r["mw_p"] < 0.01
