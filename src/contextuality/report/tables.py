"""Tables for people: Markdown and LaTeX rendered by pandas, numbers shown one way everywhere."""

from __future__ import annotations


import pandas as pd


def fmt(value, digits: int = 3) -> str:
    """A number to ``digits`` decimals, an en dash for a missing one; text as it is."""
    if isinstance(value, str):
        return value
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}f}"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "–": "--"}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in free text (labels, notes); an en dash becomes ``--``."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in str(text))


def _cells(frame: pd.DataFrame, bold: pd.DataFrame | None, mark, digits: int) -> pd.DataFrame:
    cells = frame.map(lambda value: fmt(value, digits))
    if bold is not None:
        for column in bold.columns:
            cells[column] = [mark(cell) if flag else cell for cell, flag in zip(cells[column], bold[column])]
    return cells


def markdown(frame: pd.DataFrame, bold: pd.DataFrame | None = None, digits: int = 3) -> str:
    """A GitHub-Markdown table of ``frame`` (numbers to ``digits`` decimals; ``bold`` marks cells)."""
    cells = _cells(frame, bold, lambda cell: f"**{cell}**", digits)
    align = ["left"] + ["right"] * (len(cells.columns) - 1)  # the first column names the row
    return cells.to_markdown(index=False, disable_numparse=True, colalign=align)


def latex(frame: pd.DataFrame, bold: pd.DataFrame | None = None, digits: int = 3, caption: str | None = None,
          label: str | None = None) -> str:
    """A booktabs LaTeX table of ``frame`` (needs ``\\usepackage{booktabs}``); ``bold`` marks cells."""
    cells = _cells(frame, bold, lambda cell: rf"\textbf{{{cell}}}", digits)
    cells = cells.map(lambda cell: cell if cell.startswith(r"\textbf") else latex_escape(cell))
    cells.columns = [latex_escape(column) for column in cells.columns]
    align = "l" + "r" * (len(cells.columns) - 1)
    styler = cells.style.hide(axis="index")
    return styler.to_latex(column_format=align, hrules=True, caption=caption, label=label,
                           position_float="centering" if caption else None)
