"""Reading one model's sense table (``results/metrics/{corpus}/{model}/senses/layers.csv``): the verdict words, the
claims' alpha, a measure's rows by layer and the formats of p values and intervals, shared by the claims of
``report.senses``, ``report.output_claim`` (W3c) and ``report.polysemy_claim`` (W4)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

HOLDS, FAILS, NA = "HOLDS", "FAILS", "N/A"
ALPHA = 0.05


def layer_series(table: pd.DataFrame, measure: str, preprocessing: str, column: str = "value") -> pd.Series:
    """One column of a sense table's rows of ``measure`` under ``preprocessing``, by layer."""
    sub = table[(table["measure"] == measure) & (table["preprocessing"] == preprocessing)]
    return sub.set_index("layer")[column].sort_index()


def rows_of(table: pd.DataFrame, measure: str, preprocessing: str = "centred") -> pd.DataFrame:
    """The rows of ``measure`` under ``preprocessing``, indexed by layer."""
    return (
        table[(table["measure"] == measure) & (table["preprocessing"] == preprocessing)].set_index("layer").sort_index()
    )


def format_p(p: float, floor: float | None = None) -> str:
    """A p value for people: "≤ floor" at a permutation or bootstrap floor (the smallest p it can give)."""
    if not np.isfinite(p):
        return "n/a"
    if floor is not None and p <= floor * (1 + 1e-9):
        return f"≤ {floor:.1g}"
    return f"{p:.2g}"


def note_floor(note: str) -> float | None:
    """The permutation floor a row's note states ("floor 0.001"), if any."""
    found = re.search(r"floor ([0-9.eE-]+)", note or "")
    return float(found.group(1)) if found else None


def ci_text(row) -> str:
    """A row's 95% interval, as the claims print it."""
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
