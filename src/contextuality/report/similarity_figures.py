"""The similarity stage's heat maps: each model's layers against each other, and each pair of models.

Each panel is one measure of one variant (``measure.similarity.tables``): debiased CKA (the primary measure) of every
variant the run computed, and mutual k-NN of the first (``raw``). A within-model table lists ℓ ≤ m only; the map
is mirrored. In a pair's maps each layer of A's best match in B (``best_for_a``) is marked with a dot. CKA shares
one colour scale, [0, 1] (debiased values below 0 are drawn as 0 and mean "no more than chance").
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from contextuality.report.figure_files import save_figure  # noqa: E402
from contextuality.report.figures import DPI, plain_text  # noqa: E402

CMAP = "viridis"


def grid_of(table: pd.DataFrame, measure: str, variant: str, *, mirror: bool) -> np.ndarray:
    """One measure of one variant as a (layers of A) x (layers of B) matrix (NaN where the table has no row)."""
    rows = table[table["variant"] == variant]
    n_a, n_b = int(table["layer_a"].max()) + 1, int(table["layer_b"].max()) + 1
    if mirror:
        n_a = n_b = max(n_a, n_b)
    grid = np.full((n_a, n_b), np.nan)
    a, b, values = rows["layer_a"].to_numpy(int), rows["layer_b"].to_numpy(int), rows[measure].to_numpy(float)
    grid[a, b] = values
    if mirror:
        grid[b, a] = values
    return grid


def panels_of(table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(measure, variant, title) of each panel: debiased CKA of every variant, then mutual k-NN of the first."""
    variants = sorted(table["variant"].unique(), key=lambda v: (v != "raw", v))
    panels = [("cka_debiased", variant, f"debiased CKA, {variant}") for variant in variants]
    if table["mutual_knn"].notna().any():
        panels.append(("mutual_knn", variants[0], f"mutual {int(table['knn_k'].iloc[0])}-NN, {variants[0]}"))
    return panels


def _heat(ax, grid: np.ndarray, title: str, xlabel: str, ylabel: str, scale: tuple[float, float]):
    image = ax.imshow(np.clip(grid, *scale), origin="lower", cmap=CMAP, vmin=scale[0], vmax=scale[1], aspect="auto")
    ax.set_title(plain_text(title), fontsize=9)
    ax.set_xlabel(plain_text(xlabel), fontsize=8)
    ax.set_ylabel(plain_text(ylabel), fontsize=8)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return image


def _scale(measure: str, grid: np.ndarray) -> tuple[float, float]:
    if measure == "mutual_knn":
        top = np.nanmax(grid) if np.isfinite(grid).any() else 1.0
        return 0.0, float(max(top, 1e-6))
    return 0.0, 1.0


def draw_model_similarity(table: pd.DataFrame, label: str, paths: dict) -> None:
    """A model's layers against each other: one heat map per panel (``panels_of``)."""
    panels = panels_of(table)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    for ax, (measure, variant, title) in zip(axes[0], panels):
        grid = grid_of(table, measure, variant, mirror=True)
        image = _heat(ax, grid, title, "layer", "layer", _scale(measure, grid))
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    n = int(table["n"].iloc[0]) if len(table) else 0
    fig.suptitle(plain_text(f"{label}: layer against layer ({n:,} word occurrences)"), fontsize=10)
    fig.tight_layout()
    save_figure(fig, paths, dpi=DPI)
    plt.close(fig)


def draw_pairs_similarity(tables: list[pd.DataFrame], labels: dict[str, str], paths: dict) -> None:
    """Each pair of models (a row of panels): model A's layers (y) against model B's (x); dots: A's best match."""
    if not tables:
        fig, ax = plt.subplots(figsize=(4, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "one model: no pair to compare", ha="center", va="center")
        save_figure(fig, paths, dpi=DPI)
        plt.close(fig)
        return
    panels = panels_of(tables[0])
    fig, axes = plt.subplots(len(tables), len(panels), figsize=(3.6 * len(panels), 3.2 * len(tables)), squeeze=False)
    for row, table in zip(axes, tables):
        a, b = table["model_a"].iloc[0], table["model_b"].iloc[0]
        for ax, (measure, variant, title) in zip(row, panels):
            grid = grid_of(table, measure, variant, mirror=False)
            image = _heat(ax, grid, title, labels.get(b, b), labels.get(a, a), _scale(measure, grid))
            best = table[(table["variant"] == variant) & (table["best_for_a"] == 1)]
            if measure == "cka_debiased" and len(best):
                ax.plot(best["layer_b"], best["layer_a"], "o", color="white", markersize=3, markeredgecolor="black")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    fig.suptitle("Across models: each layer of one against each layer of the other", fontsize=10)
    fig.tight_layout()
    save_figure(fig, paths, dpi=DPI)
    plt.close(fig)
