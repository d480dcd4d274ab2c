"""How the verdicts on the paper's claims depend on their thresholds: each number of ``claim_checks.THRESHOLDS``
moved in turn (×0.5, ×0.75, ×1.25 and ×1.5, the others as set), as the word-senses claims' thresholds are
(``report.senses.sensitivity``), and the section of claims.md that shows it.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from contextuality.paper import CLAIMS
from contextuality.report.claim_checks import NA, THRESHOLDS
from contextuality.report.tables import md_text, pipe_table

FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5)
COLUMNS = ["model", "label", "claim", "threshold", "value", *(f"at_{f:g}" for f in FACTORS), "changes"]


def threshold_claims(name: str) -> list[str]:
    """The claims a threshold of THRESHOLDS enters: its first word is a claim's id, or the stem of several (A9)."""
    stem = name.split()[0]
    return [c.id for c in CLAIMS if c.id == stem or (c.id.startswith(stem) and c.id[len(stem) :].isalpha())]


def claims_sensitivity(evaluate: Callable[[dict[str, float], list[str]], pd.DataFrame]) -> pd.DataFrame:
    """Each threshold moved by FACTORS, one at a time: the verdict (``status``, the sampled baselines') of each claim
    it enters on each model where that claim is not N/A at every factor.

    ``evaluate``: the claims' table (``claims.evaluate_claims``'s) with the given thresholds in place of THRESHOLDS',
    of the given claims only (a moved threshold is read by its own claims: 62 whole tables took 6 s a run).
    Columns: model, label, claim, threshold, value (as set), at_{factor} (the verdict there; at_1 as set), changes.
    """
    base = evaluate({}, None).set_index(["model", "claim"])
    rows = []
    for name, value in THRESHOLDS.items():
        claims = [c for c in threshold_claims(name) if c in base.index.get_level_values("claim")]
        if not claims:
            continue
        moved = {f: evaluate({name: value * f}, claims).set_index(["model", "claim"]) if f != 1.0 else base
                 for f in FACTORS}  # fmt: skip
        for (model, claim), label in base["label"].items():
            if claim not in claims:
                continue
            at = [moved[f].loc[(model, claim), "status"] for f in FACTORS]
            if any(v != NA for v in at):
                rows.append([model, label, claim, name, value, *at, len(set(at)) > 1])
    order = {model: i for i, model in enumerate(base.index.get_level_values("model").unique())}
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values("model", key=lambda models: models.map(order), kind="stable", ignore_index=True)


def sensitivity_section(table: pd.DataFrame) -> list[str]:
    """Markdown lines for claims.md: the verdict of each claim at each moved threshold (a verdict other than the
    one as set in bold); none without rows."""
    if table.empty:
        return []
    rows = []
    for _, r in table.iterrows():
        as_set = r["at_1"]
        cells = []
        for f in FACTORS:
            verdict = r[f"at_{f:g}"]
            text = f"{r['value'] * f:g}: {verdict}"
            cells.append(f"**{text}**" if verdict != as_set else text)
        rows.append([md_text(r["label"]), r["claim"], md_text(r["threshold"]), *cells, "**changes**" if r["changes"]
                     else "stable"])  # fmt: skip
    header = ["model", "claim", "threshold", *(f"×{f:g}" if f != 1.0 else "as set" for f in FACTORS), ""]
    return [
        "## How the verdicts depend on the thresholds",
        "",
        "The numeric thresholds are this project's reading of the paper's words. Each is moved in turn to ×0.5, "
        "×0.75, ×1.25 and ×1.5 of its value (the others as set; for a negative threshold ×0.5 is the looser one), "
        "and each claim it enters is checked again with the paper's sampled baselines: a cell is the threshold "
        "there and the verdict, in bold where it differs from the verdict as set; **changes** marks a claim whose "
        "verdict moves within the range. A claim N/A at every value is left out.",
        "",
        pipe_table(header, rows, "lll" + "l" * len(FACTORS) + "l"),
        "",
    ]
