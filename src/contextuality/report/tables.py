"""Tables for people, and the text files they go into; numbers shown one way everywhere.

Two kinds of table: a DataFrame rendered through pandas (``markdown``: padded columns; ``latex``: a
booktabs float; Table 1), and cells laid out as given (``pipe_table``: a compact Markdown table with
no padding; ``latex_table``: a booktabs float with grouped headers; the summary, the claims and the
losses). Cells are text; each renderer makes it safe for its format (``md_cell``, ``latex_escape``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.report.markdown import md_cell, md_text  # re-exported: the tables' cells


def fmt(value, digits: int = 3) -> str:
    """A number to ``digits`` decimals, an en dash for a missing one; text as it is."""
    if isinstance(value, str):
        return value
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def fmt_signed(value, digits: int = 2) -> str:
    """A number with its sign (+0.05, -0.14), an en dash for a missing one."""
    return "–" if value is None or pd.isna(value) else f"{value:+.{digits}f}"


def fmt_ci(low, high, digits: int = 3) -> str:
    """A 95% interval: [low, high]."""
    return f"[{fmt(low, digits)}, {fmt(high, digits)}]"


def fmt_span(low, high, digits: int = 2) -> str:
    """A range of values: one value when both ends agree at ``digits``, "a–b", or "a to b" when one is negative."""
    a, b = fmt(low, digits), fmt(high, digits)
    if a == b:
        return a
    return f"{a} to {b}" if a.startswith("-") or b.startswith("-") else f"{a}–{b}"


def fmt_count(value) -> str:
    """A count with thousands separators (12,437)."""
    return "–" if value is None or pd.isna(value) else f"{int(round(float(value))):,}"


def fmt_share(value, digits: int = 0) -> str:
    """A share as a percentage (48%)."""
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}%}"


def fmt_share_span(low, high) -> str:
    """A range of shares as percentages: 4-20%, or one share when both ends agree."""
    a, b = fmt_share(low), fmt_share(high)
    return a if a == b else f"{a[:-1]}-{b}"


def fmt_layers(layers: Iterable[int]) -> str:
    """Layer numbers as runs: 1-4, 6, 9-11 (none: "none")."""
    numbers = sorted({int(x) for x in layers})
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "none"


def fmt_in_layers(layers: Iterable[int]) -> str:
    """ "layer 3" or "layers 1-4, 6"."""
    numbers = sorted({int(x) for x in layers})
    return f"layer {numbers[0]}" if len(numbers) == 1 else f"layers {fmt_layers(numbers)}"


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) under a temporary name, then rename it to ``path``."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(path)


# --------------------------------------------------------------------------------------------------
# Markdown


_MD_ALIGN = {"-": "---", "l": ":---", "c": ":---:", "r": "---:"}


def pipe_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> str:
    """A compact GitHub-Markdown pipe table (no padding), every cell made safe by ``md_cell``.

    ``align`` has one letter per column: ``r`` right, ``l`` left, ``c`` centred, ``-`` the reader's
    default (``---``).
    """
    if len(align) != len(header):
        raise ValueError(f"{len(header)} columns, {len(align)} alignments ({align!r})")
    lines = [_pipe_row(header), "|" + "|".join(_MD_ALIGN[a] for a in align) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells in a table of {len(header)} columns: {row!r}")
        lines.append(_pipe_row(row))
    return "\n".join(lines)


def _pipe_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(md_cell(cell) for cell in cells) + " |"


def markdown(frame: pd.DataFrame, bold: pd.DataFrame | None = None, digits: int = 3) -> str:
    """A padded GitHub-Markdown table of ``frame`` (numbers to ``digits`` decimals; ``bold`` marks cells; text,
    such as a label, shown as written)."""
    text_as_written = frame.map(lambda value: md_cell(md_text(value)) if isinstance(value, str) else value)
    cells = _cells(text_as_written, bold, lambda cell: f"**{cell}**", digits)
    align = ["left"] + ["right"] * (len(cells.columns) - 1)  # the first column names the row
    return cells.to_markdown(index=False, disable_numparse=True, colalign=align)


# --------------------------------------------------------------------------------------------------
# LaTeX

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
}
# The marks of the report's tables: ≈ an approximate value, † a layer after the model's final norm.
_LATEX_MARKS = {"≈": r"$\approx$", "†": r"$^\dagger$"}


def latex_escape(text: str, *, marks: bool = False) -> str:
    """Escape LaTeX's special characters in free text (labels, notes); an en dash becomes ``--``.

    With ``marks``, the tables' marks ≈ and † become ``$\\approx$`` and ``$^\\dagger$`` too.
    """
    special = _LATEX_SPECIAL | _LATEX_MARKS if marks else _LATEX_SPECIAL
    return "".join(special.get(char, char) for char in str(text))


def latex_table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    align: str,
    *,
    caption: str,
    label: str,
    groups: Sequence[str | tuple[str, int]] = (),
    position: str = "t",
    size: str = r"\small",
    tabcolsep: str = "3pt",
) -> str:
    """A booktabs table float (needs ``\\usepackage{booktabs}``) of text cells, each escaped with its marks.

    ``align`` is the tabular's column spec; ``caption`` is LaTeX already (escape its free text with
    ``latex_escape``). ``groups``, when given, is a header row above ``header``: text cells, and
    ``(name, span)`` pairs whose name is centred over ``span`` columns and underlined (``\\multicolumn``,
    ``\\cmidrule``).
    """
    lines = [
        rf"\begin{{table}}[{position}]",
        r"\centering",
        size,
        rf"\setlength{{\tabcolsep}}{{{tabcolsep}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
    ]
    if groups:
        lines += _latex_groups(groups)
    lines += [
        _latex_row(header),
        r"\midrule",
        *(_latex_row(row) for row in rows),
        r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{{caption}}}",
        rf"\label{{{label}}}",
        r"\end{table}",
    ]
    return "\n".join(lines)


def _latex_row(cells: Sequence[str]) -> str:
    return " & ".join(latex_escape(cell, marks=True) for cell in cells) + r" \\"


def _latex_groups(groups: Sequence[str | tuple[str, int]]) -> list[str]:
    """The header row of column groups and the rules under the groups."""
    cells, rules, column = [], [], 1
    for group in groups:
        if isinstance(group, tuple):
            name, span = group
            cells.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(name, marks=True)}}}")
            rules.append(rf"\cmidrule(lr){{{column}-{column + span - 1}}}")
            column += span
        else:
            cells.append(latex_escape(group, marks=True))
            column += 1
    return [" & ".join(cells) + r" \\", "".join(rules)]


def latex(
    frame: pd.DataFrame,
    bold: pd.DataFrame | None = None,
    digits: int = 3,
    caption: str | None = None,
    label: str | None = None,
) -> str:
    """A booktabs LaTeX table of ``frame`` (needs ``\\usepackage{booktabs}``); ``bold`` marks cells."""
    cells = _cells(frame, bold, lambda cell: rf"\textbf{{{cell}}}", digits)
    cells = cells.map(lambda cell: cell if cell.startswith(r"\textbf") else latex_escape(cell))
    cells.columns = [latex_escape(column) for column in cells.columns]
    align = "l" + "r" * (len(cells.columns) - 1)
    styler = cells.style.hide(axis="index")
    return styler.to_latex(
        column_format=align, hrules=True, caption=caption, label=label, position_float="centering" if caption else None
    )


def _cells(frame: pd.DataFrame, bold: pd.DataFrame | None, mark, digits: int) -> pd.DataFrame:
    """``frame`` as text (``fmt``), the cells flagged in ``bold`` passed through ``mark``."""
    cells = frame.map(lambda value: fmt(value, digits))
    if bold is not None:
        for column in bold.columns:
            cells[column] = [mark(cell) if flag else cell for cell, flag in zip(cells[column], bold[column])]
    return cells
