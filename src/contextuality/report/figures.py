"""Figures 1-4 of the paper, with every model of a run in one plot each; and what every figure of the report
draws the same way (plain text for labels, each model's colour and marker, the x axis, legends, writing).

Each function takes the per-model tables (``layers.parquet``; docs/data-contract.md), draws one figure and
writes it as PNG (dpi 150) and PDF. Files are written under a temporary name and renamed, so an interrupted
job never leaves a half-written figure. Models of different depth share one axis: x is the layer index, or
the relative depth layer / L when ``relative_depth`` is set (config ``figures.x_axis``). Confidence bands are
drawn wherever the tables have intervals; null controls are grey reference lines. Each model's own figures
are in ``report.model_figures``, the sense figures in ``report.sense_figures``.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from contextuality.paper import AXIS_RANGES, FIGURES, TITLES  # noqa: E402
from contextuality.report.figure_files import save_figure  # noqa: E402
from contextuality.report.paper_models import model_depth  # noqa: E402

DPI = 150
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
MEV_THRESHOLD = 0.05

_YLABELS = {
    "anisotropy": "Average cosine similarity (baseline)",
    "self_similarity": "Self-similarity − baseline",
    "intra_sentence": "Intra-sentence similarity − baseline",
    "mev": "Max. explainable variance − baseline",
}


def plain_text(label: str) -> str:
    """A label drawn as written: matplotlib reads ``$...$`` as math (an unknown command stops the figure), a
    leading ``_`` hides a legend entry, and a line break is a space in a title or legend."""
    text = " ".join(str(label).split()).replace("$", r"\$")
    return "\N{ZERO WIDTH SPACE}" + text if text.startswith("_") else text


def legend_below(ax, fontsize: float = 9, ncol: int = 1) -> None:
    """The axes' legend below it, outside the data, in text a report page can read (none without labels)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=ncol)


def model_style(index: int) -> dict:
    """Colour and marker of the index-th model: distinct for up to 10 models, then cycling."""
    colors = plt.get_cmap("tab10").colors
    return {"color": colors[index % len(colors)], "marker": MARKERS[index % len(MARKERS)]}


def x_positions(layers: np.ndarray, depth: int, relative_depth: bool) -> np.ndarray:
    """Positions on the x axis: layer index, or layer / depth."""
    return layers / max(depth, 1) if relative_depth else layers.astype(float)


def _series(
    table: pd.DataFrame, value: str, ci: tuple[str, str] | None, shift: str | None, min_layer: int = 0
) -> pd.DataFrame:
    """Layer, value and CI bounds (shifted by a baseline column when the CI is of the raw measure).

    The CI columns of layers.parquet bound the raw measure; the adjusted measure is raw minus a
    per-layer constant, so its CI is the raw CI shifted by that constant.
    """
    t = table.sort_values("layer")
    out = pd.DataFrame({"layer": t["layer"].to_numpy(int), "value": t[value].to_numpy(float)})
    if ci is not None and all(c in t.columns for c in ci):
        offset = t[shift].to_numpy(float) if shift else 0.0
        out["low"] = t[ci[0]].to_numpy(float) - offset
        out["high"] = t[ci[1]].to_numpy(float) - offset
    out = out[(out["layer"] >= min_layer) & np.isfinite(out["value"])]
    return out.reset_index(drop=True)


def _finish(ax, name: str, values: list[np.ndarray], relative_depth: bool, max_layer: int) -> None:
    """Axis labels, title, grid, the paper's y range widened to show every value, and legend."""
    low, high = AXIS_RANGES[name]
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.array([])
    if finite.size:
        pad = 0.05 * (max(high, finite.max()) - min(low, finite.min()))
        low = finite.min() - pad if finite.min() < low else low
        high = finite.max() + pad if finite.max() > high else high
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
    ax.set_ylim(low, high)
    if relative_depth:
        ax.set_xlabel("Relative depth (layer / number of layers)")
        ax.set_xlim(-0.05, 1.05)
    else:
        ax.set_xlabel("Layer")
        ax.set_xticks(range(0, max_layer + 1, max(1, (max_layer + 1) // 25 + 1)))
    ax.set_ylabel(_YLABELS[name])
    ax.set_title(TITLES[name])
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.set_axisbelow(True)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)


def save_and_close(fig, png: str | os.PathLike, pdf: str | os.PathLike) -> tuple[Path, Path]:
    """Write the figure as PNG and PDF, each to a temporary file then renamed into place."""
    try:
        save_figure(fig, {"png": png, "pdf": pdf}, dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return Path(png), Path(pdf)


def _line_figure(
    name: str,
    value: str,
    ci: tuple[str, str] | None,
    shift: str | None,
    layer_tables: dict[str, pd.DataFrame],
    labels: dict[str, str],
    png,
    pdf,
    relative_depth: bool,
) -> tuple[Path, Path]:
    """One line per model over layers, with a CI band where the table has one."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    shown, max_layer = [], 0
    for i, (model, table) in enumerate(layer_tables.items()):
        s = _series(table, value, ci, shift)
        if s.empty:
            continue
        depth = model_depth(table)
        max_layer = max(max_layer, depth)
        x = x_positions(s["layer"].to_numpy(), depth, relative_depth)
        style = model_style(i)
        ax.plot(
            x,
            s["value"],
            linestyle=":",
            linewidth=1.8,
            markersize=6,
            label=plain_text(labels.get(model, model)),
            **style,
        )
        if "low" in s and np.isfinite(s[["low", "high"]].to_numpy()).any():
            ax.fill_between(x, s["low"], s["high"], color=style["color"], alpha=0.15, linewidth=0)
            shown += [s["low"].to_numpy(), s["high"].to_numpy()]
        shown.append(s["value"].to_numpy())
    if name != "anisotropy":
        ax.axhline(0.0, color="black", linewidth=0.6)
    _finish(ax, name, shown, relative_depth, max_layer)
    return save_and_close(fig, png, pdf)


# Figures 1-3, one line per model: name -> (the column drawn, its CI columns, the baseline it is drawn against).
# Figure 1 is the anisotropy baseline itself; Figures 2 and 3 a similarity minus it, with the similarity's CI band.
_LINE_FIGURES: dict[str, tuple[str, tuple[str, str] | None, str | None]] = {
    "anisotropy": ("baseline_cosine", None, None),
    **{
        name: (f"adjusted_{name}", (f"{name}_ci_low", f"{name}_ci_high"), "baseline_cosine")
        for name in ("self_similarity", "intra_sentence")
    },
}


def plot_line_figure(
    name: str,
    layer_tables: dict[str, pd.DataFrame],
    labels: dict[str, str],
    png,
    pdf,
    *,
    relative_depth: bool = False,
) -> tuple[Path, Path]:
    """Figure 1, 2 or 3 (``name`` in ``_LINE_FIGURES``): its value per layer, one line per model."""
    value, ci, shift = _LINE_FIGURES[name]
    return _line_figure(name, value, ci, shift, layer_tables, labels, png, pdf, relative_depth)


def plot_mev(
    layer_tables: dict[str, pd.DataFrame], labels: dict[str, str], png, pdf, *, relative_depth: bool = False
) -> tuple[Path, Path]:
    """Figure 4: average MEV minus its baseline as grouped bars for layers ≥ 1, with a 5% line.

    Unlike the paper (y limited to [0, 0.1]) the y range widens to show negative bars, which
    GPT-2-like models produce.
    """
    fig, ax = plt.subplots(figsize=(9, 4.5))
    series = {
        m: _series(t, "adjusted_mev", ("mev_ci_low", "mev_ci_high"), "baseline_mev", min_layer=1)
        for m, t in layer_tables.items()
    }
    present = [m for m, s in series.items() if not s.empty]
    n = max(len(present), 1)
    max_layer = max((model_depth(layer_tables[m]) for m in present), default=1)
    slot = 1.0 / max_layer if relative_depth else 1.0  # the deepest model's layer spacing
    width = 0.8 * slot / n
    shown = []
    for i, model in enumerate(layer_tables):
        s = series[model]
        if s.empty:
            continue
        rank = present.index(model)
        x = (
            x_positions(s["layer"].to_numpy(), model_depth(layer_tables[model]), relative_depth)
            + (rank - (n - 1) / 2) * width
        )
        style = model_style(i)
        err = None
        if "low" in s and np.isfinite(s[["low", "high"]].to_numpy()).all():
            err = np.vstack([s["value"] - s["low"], s["high"] - s["value"]]).clip(min=0)
            shown += [s["low"].to_numpy(), s["high"].to_numpy()]
        ax.bar(
            x,
            s["value"],
            width=width,
            color=style["color"],
            edgecolor="black",
            linewidth=0.4,
            hatch=None if i < 10 else "//",
            yerr=err,
            capsize=2,
            error_kw={"elinewidth": 0.8},
            label=plain_text(labels.get(model, model)),
        )
        shown.append(s["value"].to_numpy())
    ax.axhline(MEV_THRESHOLD, color="black", linestyle="--", linewidth=1.0, label="5% of variance")
    ax.axhline(0.0, color="black", linewidth=0.6)
    _finish(ax, "mev", shown, relative_depth, max_layer)
    if not relative_depth:
        ax.set_xlim(0.4, max_layer + 0.6)
        ax.set_xticks(range(1, max_layer + 1, max(1, max_layer // 25 + 1)))
    return save_and_close(fig, png, pdf)


_PLOTTERS = {name: partial(plot_line_figure, name) for name in _LINE_FIGURES} | {"mev": plot_mev}
# the workflow declares one output per name in paper.FIGURES: the two lists are one
assert tuple(_PLOTTERS) == FIGURES, (tuple(_PLOTTERS), FIGURES)


def plot_all(
    layer_tables: dict[str, pd.DataFrame], labels: dict[str, str], out_dir, *, relative_depth: bool = False
) -> dict[str, tuple[Path, Path]]:
    """Draw Figures 1-4 into ``out_dir/{name}.png`` and ``.pdf``; returns name -> (png, pdf)."""
    out_dir = Path(out_dir)
    return {
        name: plot(
            layer_tables, labels, out_dir / f"{name}.png", out_dir / f"{name}.pdf", relative_depth=relative_depth
        )
        for name, plot in _PLOTTERS.items()
    }
