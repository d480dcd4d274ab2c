"""The checks of Table 1's claims (A9a-d) on the run's table1.csv: the ordering of the rows the paper's Table 1
shows (every static baseline, each model's layers 1, 2, L-1 and L), and the scores beside the paper's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from contextuality.paper import PAPER_DEPTH, PAPER_LABELS, PAPER_TABLE1, TABLE1_HEADERS, TABLE1_TASKS
from contextuality.report.claim_checks import (
    FAILS,
    HOLDS,
    NA,
    THRESHOLDS,
    ModelView,
    NotApplicable,
    Result,
    gap_verdict,
)

A9_TOLERANCE = THRESHOLDS["A9 tolerance"]  # A9: how close to the paper's scores counts as matching them
A9A_TASKS = ("SimLex999", "RW", "Google", "MSR", "SemEval2012_2")
A9B_TASKS = ("MEN", "WS353")


def _shown_rows(table1: pd.DataFrame) -> pd.DataFrame:
    """The rows the paper's Table 1 shows: every static baseline and each model's first two and last two
    contextual layers (1, 2, L-1 and L; layer 0 and the middle layers are left out, as in the paper)."""
    rows = table1[table1["layer"].isna()]
    layered = table1[table1["layer"].notna()]
    keep = [rows]
    for _, group in layered.groupby("model", sort=False):
        depth = int(group["layer"].max())
        shown = {layer for layer in (1, 2, depth - 1, depth) if 1 <= layer <= depth}
        keep.append(group[group["layer"].isin(shown)])
    return pd.concat(keep, ignore_index=True)


def _table1_parts(m: ModelView) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the shown rows of the run's Table 1, this model's shown rows, Table 1's tasks with its scores)."""
    if m.table1 is None:
        raise NotApplicable("no Table 1 in this run (static.enabled: false)")
    shown = _shown_rows(m.table1)
    mine = shown[(shown["model"] == m.label) & shown["layer"].notna()]
    if mine.empty:
        raise NotApplicable(f"no Table 1 rows for {m.label}")
    tasks = [t for t in TABLE1_TASKS if t in shown.columns and np.isfinite(mine[t].to_numpy(float)).any()]
    return shown, mine, tasks


def _best(frame: pd.DataFrame, task: str) -> tuple[float, str]:
    values = frame[task].astype(float)
    if not np.isfinite(values).any():
        return float("nan"), ""
    i = values.idxmax()
    row = frame.loc[i]
    name = row["model"] if pd.isna(row["layer"]) else f"{row['model']}, layer {int(row['layer'])}"
    return float(values[i]), name


def _a9a(m: ModelView) -> Result:
    tolerance = m.threshold("A9 tolerance")
    shown, mine, tasks = _table1_parts(m)
    first = mine[mine["layer"].isin([1, 2])]
    tasks = [t for t in A9A_TASKS if t in tasks]
    if first.empty or not tasks:
        return NA, "needs Table 1 scores of layers 1-2 on SimLex999, RW, Google, MSR or SemEval2012(2)", ""
    misses, parts_text = [], []
    for task in tasks:
        own, _ = _best(first, task)
        best, who = _best(shown, task)
        parts_text.append(f"{TABLE1_HEADERS[task]} {own:.3f} (best {best:.3f}, {who})")
        if not own >= best - tolerance:
            misses.append(TABLE1_HEADERS[task])
    evidence = "best of layers 1-2: " + "; ".join(parts_text)
    if misses:
        evidence += f"; more than {tolerance} below the best on {', '.join(misses)}"
    return (
        (FAILS if misses else HOLDS),
        evidence,
        "rows compared: each model's layers 1, 2, L-1, L and every static baseline",
    )


def _a9b(m: ModelView) -> Result:
    tolerance = m.threshold("A9 tolerance")
    shown, mine, _ = _table1_parts(m)
    fasttext = shown[
        shown["layer"].isna() & shown["model"].astype(str).str.lower().str.replace(" ", "").str.contains("fasttext")
    ]
    if fasttext.empty:
        return NA, "no FastText baseline in Table 1 (add its vectors under static.baselines)", ""
    misses, parts_text = [], []
    for task in A9B_TASKS:
        if task not in shown.columns:
            continue
        theirs, _ = _best(fasttext, task)
        own, who = _best(mine, task)
        parts_text.append(f"{TABLE1_HEADERS[task]}: FastText {theirs:.3f}, best row of the model {own:.3f} ({who})")
        if not theirs >= own - tolerance:
            misses.append(TABLE1_HEADERS[task])
    if not parts_text:
        return NA, "Table 1 has no MEN or WS353 scores", ""
    return (FAILS if misses else HOLDS), "; ".join(parts_text), ""


def _a9c(m: ModelView) -> Result:
    tolerance = m.threshold("A9 tolerance")
    shown, mine, tasks = _table1_parts(m)
    others = shown[~((shown["model"] == m.label) & shown["layer"].notna())]
    if others.empty:
        return NA, "no other model or baseline in Table 1 to compare with", ""
    worst = []
    for task in tasks:
        own_best = float(mine[task].astype(float).max())
        others_worst = float(others[task].astype(float).min())
        if np.isfinite(own_best) and np.isfinite(others_worst) and own_best < others_worst + tolerance:
            worst.append(TABLE1_HEADERS[task])
    needed = max(len(tasks) - 1, 1)
    rest = [TABLE1_HEADERS[t] for t in tasks if TABLE1_HEADERS[t] not in worst]
    evidence = f"its rows are below every other row on {len(worst)} of {len(tasks)} tasks (needed: {needed})" + (
        f"; not on {', '.join(rest)}" if rest else ""
    )
    note = "rows compared: each model's layers 1, 2, L-1, L and every static baseline"
    return (HOLDS if len(worst) >= needed else FAILS), evidence, note


def _a9d(m: ModelView) -> Result:
    tolerance = m.threshold("A9 tolerance")
    pdepth = PAPER_DEPTH[m.paper_model]
    if m.depth != pdepth:
        return NA, f"depth {m.depth} differs from the paper's {pdepth}: no row-by-row comparison", ""
    _, mine, tasks = _table1_parts(m)
    name = PAPER_LABELS[m.paper_model]
    gaps = []
    for label, values in PAPER_TABLE1.items():
        if not label.startswith(f"{name}, Layer "):
            continue
        layer = int(label.rsplit(" ", 1)[1])
        row = mine[mine["layer"] == layer]
        for task in tasks:
            if len(row) and np.isfinite(float(row[task].iloc[0])):
                gaps.append((abs(float(row[task].iloc[0]) - values[task]), TABLE1_HEADERS[task], layer))
    return gap_verdict(gaps, tolerance, "scores", "no comparable rows")


TABLE1_CHECKS: dict[str, Callable[[ModelView], Result]] = {"A9a": _a9a, "A9b": _a9b, "A9c": _a9c, "A9d": _a9d}
