"""The paper's claims' thresholds, our reading of its words: each in its claim's statement, the verdicts at moved
thresholds on tables whose answer is known, and S4's raw MEV beside its baseline with the attention-sink reading."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contextuality.paper import CLAIMS
from contextuality.report.claim_checks import HOLDS, THRESHOLDS, ModelView, _s4
from contextuality.report.claim_sensitivity import (
    FACTORS,
    claims_sensitivity,
    sensitivity_section,
    threshold_claims,
)
from contextuality.report.claims import claims_report, evaluate_claims

# Adjusted self-similarity over layers 0-5 whose value ranks are 3, 5, 6, 4, 2, 1: sum of d^2 = 56, so Spearman's
# rho(layer, value) = 1 - 6 * 56 / (6 * 35) = -0.6 exactly.
RHO_MINUS_06 = [0.3, 0.5, 0.6, 0.4, 0.2, 0.1]


def table(baseline, self_adj, mev, baseline_mev, **extra) -> pd.DataFrame:
    """A layers table of a model with no paper counterpart (only the general claims apply)."""
    b, bm, mev = (np.asarray(v, float) for v in (baseline, baseline_mev, mev))
    frame = pd.DataFrame(
        {
            "model": "m",
            "layer": np.arange(len(b)),
            "self_similarity": np.asarray(self_adj, float) + b,
            "intra_sentence": b + 0.1,
            "mev": mev,
            "baseline_cosine": b,
            "baseline_mev": bm,
            "adjusted_self_similarity": np.asarray(self_adj, float),
            "adjusted_intra_sentence": 0.1,
            "adjusted_mev": mev - bm,
        }
    )
    return frame.assign(**extra)


def known():
    """Baseline cosine min 0.12 (A1b: holds up to 0.1 x 1.2; S1 at every factor), rho = -0.6 (S3: holds up to -0.6),
    adjusted MEV max 0.03 (S4: holds from 0.0375 up)."""
    return table(
        baseline=[0.12, 0.2, 0.3, 0.3, 0.3, 0.3],
        self_adj=RHO_MINUS_06,
        mev=[np.nan, 0.05, 0.06, 0.06, 0.07, 0.08],
        baseline_mev=[0.0, 0.02, 0.04, 0.04, 0.05, 0.06],
    )


def test_every_threshold_is_in_its_claims_statement():
    statements = {c.id: c.text for c in CLAIMS}
    assert "≤ -0.5" in statements["S3"]
    for name, value in THRESHOLDS.items():
        if name.startswith("A6"):  # "most of" five words: 3
            continue
        shown = 1 - value if name.startswith("A2 top layer") else value
        for claim in threshold_claims(name):
            assert f"{shown:g}" in statements[claim], (name, claim)
    assert threshold_claims("A9 tolerance") == ["A9a", "A9b", "A9c", "A9d"]
    assert threshold_claims("A1a baseline cosine below") == ["A1a"]
    assert threshold_claims("A10 tolerance") == ["A10"]


def evaluate_known(thresholds=None, only=None):
    return evaluate_claims({"m": known()}, None, {"m": "M"}, {"m": None}, thresholds=thresholds, only=only)


def test_verdicts_at_each_moved_threshold_are_the_known_ones():
    as_set = evaluate_known().set_index("claim")["status"]
    assert as_set[["A1b", "A5a", "S1", "S2", "S3", "S4"]].tolist() == [HOLDS] * 6
    moved = claims_sensitivity(evaluate_known).set_index("claim")
    verdicts = {claim: moved.loc[claim, [f"at_{f:g}" for f in FACTORS]].tolist() for claim in moved.index}
    assert sorted(verdicts) == ["A1b", "S1", "S3", "S4"]  # the claims with a numeric threshold
    assert verdicts["A1b"] == ["HOLDS", "HOLDS", "HOLDS", "FAILS", "FAILS"]  # 0.05 0.075 0.1 | 0.125 0.15 > 0.12
    assert verdicts["S1"] == ["HOLDS"] * 5  # 0.2 > 0.075
    assert verdicts["S3"] == ["HOLDS", "HOLDS", "HOLDS", "FAILS", "FAILS"]  # -0.6 <= -0.25 .. -0.5, not -0.625
    assert verdicts["S4"] == ["FAILS", "HOLDS", "HOLDS", "HOLDS", "HOLDS"]  # 0.03 >= 0.025
    assert moved["changes"].to_dict() == {"A1b": True, "S1": False, "S3": True, "S4": True}
    assert moved.loc["S3", "threshold"] == "S3 rho at most" and moved.loc["S3", "value"] == -0.5


def test_the_section_marks_the_verdicts_that_move(tmp_path):
    lines = sensitivity_section(claims_sensitivity(evaluate_known))
    row = next(line for line in "\n".join(lines).splitlines() if "| S3 |" in line)
    assert row == (
        "| M | S3 | S3 rho at most | -0.25: HOLDS | -0.375: HOLDS | -0.5: HOLDS | **-0.625: FAILS** | "
        "**-0.75: FAILS** | **changes** |"
    )
    assert sensitivity_section(claims_sensitivity(lambda t, only: evaluate_known(t, only).iloc[0:0])) == []
    claims_report({"m": known()}, None, {"m": "M"}, {"m": None}, tmp_path / "claims.md")
    text = (tmp_path / "claims.md").read_text()
    assert "The numeric thresholds are this project's operationalisation of the paper's words" in text
    assert "## How the verdicts depend on the thresholds" in text and row in text


def view(t: pd.DataFrame) -> ModelView:
    return ModelView(t.set_index("layer"), int(t["layer"].max()), None, None)


SINKY = dict(
    baseline=[0.1, 0.5, 0.5, 0.5],
    self_adj=[0.5, 0.4, 0.3, 0.2],
    mev=[np.nan, 0.2, 0.21, 0.08],  # raw MEV 4x the paper's 5% at layers 1-2; 0.08 < 2 x 0.05 at layer 3
    baseline_mev=[0.0, 0.18, 0.19, 0.06],  # adjusted 0.02 everywhere: S4 holds
)


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            {"massive_occurrences": [0, 30, 30, 30], "massive_first_position_share": [np.nan, 0.9, 0.95, 0.9]},
            "; attention-sink rows inflate the baseline at layers 1-2 (massive activations, 90%-95% of them at "
            "a sentence's first position)",
        ),
        (
            {"massive_occurrences": [0, 30, 0, 0], "massive_first_position_share": [np.nan, 0.2, np.nan, np.nan]},
            "; no attention-sink rows there (massive activations 50%+ at first positions)",
        ),
        ({}, "; attention-sink rows not measured (no massive-activation columns)"),
    ],
)
def test_s4_gives_the_raw_mev_beside_the_baseline_and_when_sink_rows_decide_it(extra, expected):
    status, evidence, _ = _s4(view(table(**SINKY, **extra)))
    assert status == HOLDS
    assert evidence == (
        "adjusted MEV, layers ≥ 1: max 0.020 (layer 1); raw MEV 0.080-0.210 beside baseline MEV 0.060-0.190; "
        "the baseline decides it at layers 1-2: raw MEV ≥ 0.1 (2× the threshold) while adjusted MEV is below 0.05"
        + expected
    )


def test_s4_says_nothing_of_the_baseline_when_the_raw_mev_is_small():
    status, evidence, _ = _s4(view(known()))
    assert status == HOLDS
    assert (
        evidence == "adjusted MEV, layers ≥ 1: max 0.030 (layer 1); raw MEV 0.050-0.080 beside baseline MEV 0.020-0.060"
    )


def test_a3_names_a_sentence_encoders_trained_last_layer():
    bert_like = table(baseline=[0.1, 0.4, 0.2], self_adj=[0.5, 0.3, 0.1], mev=[np.nan, 0.02, 0.02], baseline_mev=0.0)
    plain = evaluate_claims({"m": bert_like}, None, {"m": "M"}, {"m": "bert"}).set_index("claim")
    encoder = evaluate_claims(
        {"m": bert_like}, None, {"m": "M"}, {"m": "bert"}, trainings={"m": "sentence-encoder"}
    ).set_index("claim")
    assert plain.loc["A3", "status"] == encoder.loc["A3", "status"] == HOLDS  # gap 0.4 - 0.2 > 0.1
    assert plain.loc["A3", "evidence"] == "baseline layer 1: 0.400, layer 2: 0.200 (gap +0.200)"
    assert encoder.loc["A3", "evidence"] == (
        "baseline layer 1: 0.400, layer 2: 0.200 (gap +0.200); layer 2 is the one the model's sentence-embedding "
        "objective trains (training: sentence-encoder), so its lower anisotropy may be that objective's, not its "
        "pretraining's"
    )
    assert (plain.drop(index="A3")["evidence"] == encoder.drop(index="A3")["evidence"]).all()
    failing = bert_like.assign(baseline_cosine=[0.1, 0.2, 0.4])  # the last layer more anisotropic: nothing to explain
    result = evaluate_claims({"m": failing}, None, {"m": "M"}, {"m": "bert"}, trainings={"m": "sentence-encoder"})
    assert result.set_index("claim").loc["A3", "evidence"] == "baseline layer 1: 0.200, layer 2: 0.400 (gap -0.200)"


def test_claims_evaluated_alone_are_the_rows_of_the_whole_table():
    """The sensitivity evaluates a moved threshold's claims alone: their rows equal those of every claim evaluated."""
    whole = evaluate_known()
    alone = evaluate_known({}, ["A1b", "S3"])
    assert alone.equals(whole[whole["claim"].isin(["A1b", "S3"])].reset_index(drop=True))
