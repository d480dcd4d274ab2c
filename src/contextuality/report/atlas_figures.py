"""The atlas's figures: ``atlas`` (six panels on relative depth, one line per model, from ``atlas_curves.csv``)
and ``atlas_cka`` (the debiased-CKA map of every pair of models, from the pair tables). Drawn as every figure
of the report is (``report.figures``: each model's colour and marker from its place in the run, plain-text
labels) and written once per format of ``figure_files.FORMATS`` with no date in the file.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from contextuality.report.figure_files import FORMATS, save_figure  # noqa: E402
from contextuality.report.figures import DPI, model_style, plain_text  # noqa: E402

# (measure of atlas_curves.csv, title, y label, reference line): the six panels, in reading order.
PANELS = (
    ("anisotropy", "Anisotropy", "mean cosine of two random words", None),
    ("self_similarity_adj", "Self-similarity − anisotropy", "adjusted cosine", 0.0),
    ("intra_sentence_adj", "Intra-sentence similarity − anisotropy", "adjusted cosine", 0.0),
    ("mev_adj", "Max. explainable variance − baseline", "adjusted share of variance", 0.0),
    ("senses_auroc", "Word senses: same vs different sense", "AUROC (thin: shape alone, no model)", 0.5),
    ("cka_last_layer", "Debiased CKA with the model's last layer", "debiased CKA", 0.0),
)
CONTEXT_NOTE = (
    "A decoder has read only the left context of a word, an encoder both sides: low similarity between a decoder "
    "and an encoder is partly that, not only different representations."
)
GRID_COLUMNS = 5  # heat maps per row of atlas_cka


def paths_by_format(paths: Iterable[str | os.PathLike]) -> dict[str, Path]:
    """A figure's files (one per format, in any order) by format, from their suffixes."""
    by_format = {Path(path).suffix.lstrip("."): Path(path) for path in paths}
    if set(by_format) != set(FORMATS):
        raise ValueError(f"figure files {sorted(map(str, by_format.values()))}: expected one per format {FORMATS}")
    return by_format


def _save(fig, paths: Mapping[str, str | os.PathLike]) -> None:
    try:
        save_figure(fig, paths, dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)


def line_style(index: int, training: str) -> dict:
    """A model's colour and marker everywhere (its place in the run), dashed for a random-weight control."""
    return model_style(index) | {"linestyle": "--" if training == "random" else "-"}


def _empty_text(measure: str, senses_on: bool, variant: str | None) -> str:
    if measure.startswith("senses") and not senses_on:
        return "senses off"
    if measure.startswith("cka") and variant is None:
        return "no similarity tables"
    return "no data"


def _draw_panel(ax, curves: pd.DataFrame, rows: pd.DataFrame, measure: str) -> bool:
    """One line per model (a band where the curve has an interval); the senses panel adds the shape baseline."""
    drawn = False
    for index, row in enumerate(rows.itertuples(index=False)):
        mine = curves[curves["model"] == row.model]
        line = mine[mine["measure"] == measure]
        if line.empty:
            continue
        drawn = True
        style = line_style(index, row.training)
        x = line["relative_depth"].to_numpy(float)
        ax.plot(x, line["value"], linewidth=1.6, markersize=3.5, **style)
        low, high = line["ci_low"].to_numpy(float), line["ci_high"].to_numpy(float)
        if np.isfinite(low).any():
            ax.fill_between(x, low, high, color=style["color"], alpha=0.12, linewidth=0)
        shape = mine[mine["measure"] == "senses_auroc_shape"] if measure == "senses_auroc" else mine.iloc[:0]
        if not shape.empty:
            ax.plot(shape["relative_depth"], shape["value"], color=style["color"], linewidth=0.8, alpha=0.8)
    return drawn


def _legend_handles(rows: pd.DataFrame, senses_on: bool) -> list[Line2D]:
    handles = []
    for index, row in enumerate(rows.itertuples(index=False)):
        control = " (random-weight control)" if row.training == "random" else ""
        label = f"{plain_text(row.label)}, {row.kind}{control}"
        handles.append(Line2D([], [], linewidth=1.6, markersize=5, label=label, **line_style(index, row.training)))
    if senses_on:
        handles.append(Line2D([], [], color="0.3", linewidth=0.8, label="thin line: word senses from shape alone"))
    return handles


def plot_atlas(
    curves: pd.DataFrame,
    rows: pd.DataFrame,
    paths: Mapping[str, str | os.PathLike],
    *,
    senses_on: bool,
    variant: str | None,
) -> None:
    """The six panels of the atlas on relative depth (``rows``: the atlas table, the models in the run's order;
    ``paths``: format -> file)."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.4))
    for ax, (measure, title, ylabel, reference) in zip(axes.ravel(), PANELS):
        if reference is not None:
            ax.axhline(reference, color="grey", linewidth=0.8, zorder=0)
        if not _draw_panel(ax, curves, rows, measure):
            text = _empty_text(measure, senses_on, variant)
            ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xlabel("relative depth ℓ / (L − 1)", fontsize=9)
        ax.set_xlim(-0.03, 1.03)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.set_axisbelow(True)
    handles = _legend_handles(rows, senses_on)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(handles)), frameon=False)
    fig.suptitle("Atlas: every model on relative depth (dashed: random-weight controls)", fontsize=13)
    fig.tight_layout()
    _save(fig, paths)


def _edges(n_layers: int) -> np.ndarray:
    """Cell edges on relative depth: halfway between layers, the first and last cells ending at 0 and 1."""
    centres = np.arange(n_layers) / (n_layers - 1)
    return np.concatenate([[0.0], (centres[:-1] + centres[1:]) / 2, [1.0]])


def _grid(table: pd.DataFrame, variant: str, layers_a: int, layers_b: int) -> np.ndarray:
    rows = table[table["variant"] == variant]
    grid = rows.pivot_table(index="layer_a", columns="layer_b", values="cka_debiased", aggfunc="first")
    return grid.reindex(index=range(layers_a), columns=range(layers_b)).to_numpy(float)


def plot_atlas_cka(
    pairs: Mapping[tuple[str, str], pd.DataFrame],
    rows: pd.DataFrame,
    paths: Mapping[str, str | os.PathLike],
    *,
    variant: str | None,
) -> None:
    """One debiased-CKA map per pair of models (rows: A's layers, columns: B's, both on relative depth), one
    colour scale for all, and the left-context note under the grid."""
    models = rows.set_index("model")
    grids = {
        (a, b): _grid(table, variant, int(models.at[a, "n_layers"]), int(models.at[b, "n_layers"]))
        for (a, b), table in pairs.items()
    }
    ncols = min(max(len(grids), 1), GRID_COLUMNS)
    nrows = max(1, math.ceil(len(grids) / ncols))
    # constrained: room for the titles, the shared colour bar and the suptitle, whatever the number of pairs
    size = (max(3.4 * ncols + 1.2, 7.0), 3.4 * nrows + 0.6)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, layout="constrained")
    finite = [grid[np.isfinite(grid)] for grid in grids.values()]
    low = min([0.0, *(float(values.min()) for values in finite if values.size)])
    mesh = None
    for ax, ((a, b), grid) in zip(axes.ravel(), grids.items()):
        mesh = ax.pcolormesh(
            _edges(grid.shape[1]), _edges(grid.shape[0]), np.ma.masked_invalid(grid), vmin=low, vmax=1.0
        )
        ax.set_facecolor("0.85")  # a NaN cell (debiased self term <= 0)
        label_a, label_b = (plain_text(models.at[m, "label"]) for m in (a, b))
        ax.set_title(f"{label_a} ({models.at[a, 'kind']})\nvs {label_b} ({models.at[b, 'kind']})", fontsize=9)
        ax.set_ylabel(textwrap.shorten(f"depth in {label_a}", 40), fontsize=8)
        ax.set_xlabel(textwrap.shorten(f"depth in {label_b}", 40), fontsize=8)
        ax.set_aspect("equal")
        ax.set_xticks([0, 0.5, 1])
        ax.set_yticks([0, 0.5, 1])
        ax.tick_params(labelsize=8)
    for ax in axes.ravel()[len(grids) :]:
        ax.axis("off")
    if mesh is None:
        axes[0, 0].text(0.5, 0.5, "no pair of models to compare", ha="center", va="center", color="grey")
    else:
        bar = fig.colorbar(mesh, ax=axes.ravel().tolist(), shrink=0.85)
        bar.set_label(f"debiased CKA ({variant} rows)", fontsize=9)
        bar.ax.tick_params(labelsize=8)
    note = textwrap.fill(CONTEXT_NOTE, width=round(14 * size[0]))
    fig.text(0.5, -0.02, note, ha="center", va="top", fontsize=9)  # below the grid (saved with a tight box)
    fig.suptitle("Debiased CKA between every pair of models, on relative depth", fontsize=12)
    _save(fig, paths)
