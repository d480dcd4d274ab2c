"""Each model's own figures (``report.figure_files.MODEL_FIGURES``): its geometry dashboard and its rogue
dimensions across layers, from its ``layers.parquet``, ``postprocess.csv`` and ``rogue_dimensions.csv``
(docs/data-contract.md), drawn and written as ``report.figures`` draws Figures 1-4.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from contextuality.report.figures import (  # noqa: E402
    MEV_THRESHOLD,
    legend_below,
    model_style,
    plain_text,
    save_and_close,
    x_positions,
)

VARIANT_STYLES = {
    "standardize": {"color": "tab:orange", "linestyle": "--"},
    "abtt": {"color": "tab:green", "linestyle": "-."},
}
NULL_STYLES = {"gaussian": {"color": "0.45", "linestyle": ":", "linewidth": 1.4},
               "permuted": {"color": "0.6", "linestyle": (0, (5, 2)), "linewidth": 1.2}}  # fmt: skip
NULL_LABELS = {"gaussian": "null: isotropic Gaussian", "permuted": "null: dimensions permuted"}
# Plain names in the figures for the code names of the tables' columns and variants.
VARIANT_LABELS = {"standardize": "standardised", "abtt": "all-but-the-top removed"}
MEASURE_LABELS = {
    "isoscore": "IsoScore",
    "isoscore_star": "IsoScore*",
    "effective_rank": "effective rank",
    "twonn_dimension": "intrinsic dimension",
}


def _col(table: pd.DataFrame, column: str) -> np.ndarray:
    return table[column].to_numpy(float) if column in table.columns else np.full(len(table), np.nan)


def _axis(ax, relative_depth: bool, depth: int, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=9)
    if relative_depth:
        ax.set_xlabel("Relative depth (layer / number of layers)", fontsize=9)
        ax.set_xlim(-0.05, 1.05)
    else:
        ax.set_xlabel("Layer", fontsize=9)
        ax.set_xticks(range(0, depth + 1, max(1, (depth + 1) // 13 + 1)))
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.tick_params(labelsize=8)
    ax.set_axisbelow(True)


def _band(ax, x, low, high, color) -> None:
    if np.isfinite(low).any() and np.isfinite(high).any():
        ax.fill_between(x, low, high, color=color, alpha=0.18, linewidth=0)


def _mark_final_norm(axes, table: pd.DataFrame, x: np.ndarray) -> None:
    """A vertical line at a layer measured after the final norm (a pre-norm decoder's last hidden state)."""
    flags = _col(table, "after_final_norm")
    for ax in axes:
        for position in x[flags == 1]:
            ax.axvline(position, color="tab:purple", linewidth=0.8, alpha=0.6, linestyle="--")


def plot_geometry_dashboard(
    layers: pd.DataFrame, postprocess: pd.DataFrame | None, label: str, png, pdf, *, relative_depth: bool = False
) -> tuple[Path, Path]:
    """One model's dashboard: the paper's four measures and the geometry beyond them, per layer.

    Top row: the anisotropy baselines (sampled, as the paper; exact), adjusted self-similarity,
    adjusted intra-sentence similarity and adjusted MEV (against the sampled baseline, with the
    bootstrap CI shifted by it; dotted: against the exact baseline; dashed and dash-dotted: the
    ``standardize`` and ``abtt`` variants of postprocess.csv). Bottom row: the rogue dimensions' share
    of the exact anisotropy (top 1, 3, 10), IsoScore and IsoScore*, the effective rank and the TwoNN
    intrinsic dimension, each with the same measure of the layer's null controls (an isotropic
    Gaussian of the sample's shape; the sample with each dimension permuted) as grey reference lines.
    A purple dashed line marks a layer taken after the model's final norm.
    """
    t = layers.sort_values("layer").reset_index(drop=True)
    depth = int(t["layer"].max()) if len(t) else 1
    x = x_positions(t["layer"].to_numpy(), depth, relative_depth)
    fig, axes = plt.subplots(2, 4, figsize=(17, 13), layout="constrained")
    top, bottom = axes
    _paper_measures_row(top, t, _variants(postprocess, t["layer"]), x, relative_depth, depth)
    _geometry_row(bottom, t, x, relative_depth, depth)
    _mark_final_norm(axes.ravel(), t, x)
    for ax in axes.ravel():
        legend_below(ax, fontsize=10)
    fig.suptitle(
        f"{plain_text(label)}: geometry per layer (the paper's measures, rogue dimensions, isotropy; "
        "grey: null controls)"
    )
    return save_and_close(fig, png, pdf)


_MAIN = {"color": "tab:blue", "marker": "o", "markersize": 4, "linewidth": 1.6}
# The dashboard's adjusted measures: (layers.parquet column, stem of its CI columns, the baseline the CI is
# shifted by, title).
_ADJUSTED_PANELS = (
    ("adjusted_self_similarity", "self_similarity", "baseline_cosine", "Self-similarity − baseline"),
    ("adjusted_intra_sentence", "intra_sentence", "baseline_cosine", "Intra-sentence similarity − baseline"),
    ("adjusted_mev", "mev", "baseline_mev", "Max. explainable variance − baseline"),
)
# The dashboard's isotropy measures: (layers.parquet columns, title, y label).
_ISOTROPY_PANELS = (
    (("isoscore", "isoscore_star"), "IsoScore and IsoScore*", "score (1 = isotropic)"),
    (("effective_rank",), "Effective rank", "dimensions"),
    (("twonn_dimension",), "TwoNN intrinsic dimension", "dimensions"),
)


def _variants(postprocess: pd.DataFrame | None, layers: pd.Series) -> dict[str, pd.DataFrame]:
    """The postprocess.csv rows of each drawn variant (``VARIANT_STYLES``), one per layer of ``layers``."""
    variants = {}
    if postprocess is not None and len(postprocess):
        for name, group in postprocess.groupby("postprocess", sort=False):
            if name in VARIANT_STYLES:
                variants[name] = group.set_index("layer").reindex(layers).reset_index()
    return variants


def _paper_measures_row(
    axes, t: pd.DataFrame, variants: dict[str, pd.DataFrame], x: np.ndarray, relative_depth: bool, depth: int
) -> None:
    """The dashboard's top row: the anisotropy baselines, then the three adjusted measures."""
    ax = axes[0]
    ax.plot(x, _col(t, "baseline_cosine"), label="sampled (paper)", **_MAIN)
    ax.plot(x, _col(t, "baseline_cosine_exact"), color="black", linestyle=":", linewidth=1.4, label="exact (every row)")
    for name, v in variants.items():
        ax.plot(x, _col(v, "baseline_cosine_exact"), label=f"{VARIANT_LABELS[name]} (exact)", **VARIANT_STYLES[name])
    ax.axhline(0.0, color="black", linewidth=0.6)
    _axis(ax, relative_depth, depth, "Anisotropy (mean cosine of random words)", "cosine")
    for ax, (value, ci, baseline, title) in zip(axes[1:], _ADJUSTED_PANELS):
        shift = _col(t, baseline)
        ax.plot(x, _col(t, value), label="stored vectors", **_MAIN)
        _band(ax, x, _col(t, f"{ci}_ci_low") - shift, _col(t, f"{ci}_ci_high") - shift, _MAIN["color"])
        ax.plot(
            x, _col(t, f"{value}_exact"), color="black", linestyle=":", linewidth=1.4, label="against exact baseline"
        )
        for name, v in variants.items():
            ax.plot(x, _col(v, value), label=VARIANT_LABELS[name], **VARIANT_STYLES[name])
        ax.axhline(0.0, color="black", linewidth=0.6)
        if value == "adjusted_mev":
            ax.axhline(MEV_THRESHOLD, color="black", linestyle="--", linewidth=0.8)
        _axis(ax, relative_depth, depth, title, "adjusted value")


def _geometry_row(axes, t: pd.DataFrame, x: np.ndarray, relative_depth: bool, depth: int) -> None:
    """The dashboard's bottom row: the rogue dimensions' share of the anisotropy, then the isotropy measures,
    each with its null controls."""
    ax = axes[0]
    for k, marker in ((1, "o"), (3, "s"), (10, "^")):
        ax.plot(
            x,
            _col(t, f"rogue_top{k}_share"),
            marker=marker,
            markersize=4,
            linewidth=1.4,
            label="largest dimension" if k == 1 else f"largest {k} dimensions",
        )
    for null in NULL_STYLES:
        ax.plot(
            x, _col(t, f"null_{null}_rogue_top1_share"), label=f"{NULL_LABELS[null]} (largest)", **NULL_STYLES[null]
        )
    _axis(ax, relative_depth, depth, "Rogue dimensions: share of the anisotropy", "share of the anisotropy")
    for ax, (columns, title, ylabel) in zip(axes[1:], _ISOTROPY_PANELS):
        for column, marker in zip(columns, ("o", "s")):
            ax.plot(
                x, _col(t, column), marker=marker, markersize=4, linewidth=1.4, label=MEASURE_LABELS.get(column, column)
            )
            for null in NULL_STYLES:
                shown = f" ({MEASURE_LABELS.get(column, column)})" if len(columns) > 1 else ""
                ax.plot(x, _col(t, f"null_{null}_{column}"), label=f"{NULL_LABELS[null]}{shown}", **NULL_STYLES[null])
        _axis(ax, relative_depth, depth, title, ylabel)


def top_rogue_dimensions(rogue: pd.DataFrame, per_layer: int = 3, limit: int = 8) -> list[int]:
    """The dimensions to follow across layers: each layer's top ``per_layer`` by contribution, the ``limit``
    with the largest contribution anywhere (largest first)."""
    if rogue.empty:
        return []
    top = rogue[rogue["rank"] <= per_layer]
    peak = top.groupby("dimension")["contribution"].max().sort_values(ascending=False, kind="stable")
    return [int(d) for d in peak.index[:limit]]


def plot_rogue_dimensions(
    rogue: pd.DataFrame,
    layers: pd.DataFrame,
    label: str,
    png,
    pdf,
    *,
    relative_depth: bool = False,
    per_layer: int = 3,
    limit: int = 8,
) -> tuple[Path, Path]:
    """The top rogue dimensions' contributions to the exact anisotropy A_p across one model's layers.

    Left: each followed dimension's contribution C_k (``top_rogue_dimensions``), the total A_p and the
    rest of the dimensions together; right: the same as shares of A_p (undefined where A_p is not above
    its isotropic noise), with the share of the top dimension in the permuted null as reference.
    """
    t = layers.sort_values("layer").reset_index(drop=True)
    depth = int(t["layer"].max()) if len(t) else 1
    layer_x = x_positions(t["layer"].to_numpy(), depth, relative_depth)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), layout="constrained")
    dims = top_rogue_dimensions(rogue, per_layer, limit)
    total = _col(t, "rogue_anisotropy")
    left.plot(
        layer_x, total, color="black", linewidth=2.0, marker="o", markersize=4, label="the anisotropy (all dimensions)"
    )
    followed = np.zeros(len(t))
    for i, dim in enumerate(dims):
        series = rogue[rogue["dimension"] == dim].set_index("layer").reindex(t["layer"])
        style = model_style(i)
        contribution = series["contribution"].to_numpy(float)
        followed += np.nan_to_num(contribution)
        left.plot(layer_x, contribution, linewidth=1.4, markersize=4, label=f"dim {dim}", **style)
        right.plot(layer_x, series["share"].to_numpy(float), linewidth=1.4, markersize=4, label=f"dim {dim}", **style)
    if dims:
        left.plot(layer_x, total - followed, color="0.5", linestyle="--", linewidth=1.2, label="all other dimensions")
    right.plot(layer_x, _col(t, "null_permuted_rogue_top1_share"), label=NULL_LABELS["permuted"] + " (largest dimension)",
               **NULL_STYLES["permuted"])  # fmt: skip
    for ax in (left, right):
        ax.axhline(0.0, color="black", linewidth=0.6)
    _axis(
        left,
        relative_depth,
        depth,
        "Contribution of each dimension to the anisotropy",
        "contribution (the dimensions sum to the anisotropy)",
    )
    _axis(right, relative_depth, depth, "Share of the anisotropy", "share of the anisotropy")
    _mark_final_norm((left, right), t, layer_x)
    if not dims:
        left.text(0.5, 0.5, "no rogue dimensions measured", transform=left.transAxes, ha="center", color="grey")
    for ax in (left, right):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"{plain_text(label)}: rogue dimensions (Timkey & van Schijndel, 2021) across layers")
    return save_and_close(fig, png, pdf)
