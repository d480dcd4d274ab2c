"""Figures 1-4 of the paper, with every model of a run in one plot each; and per model, a geometry
dashboard and its rogue dimensions across layers.

Each function takes the per-model tables (``layers.parquet``, ``postprocess.csv``,
``rogue_dimensions.csv``; docs/data-contract.md), draws one figure and writes it as PNG (dpi 150) and
PDF. Files are written under a temporary name and renamed, so an interrupted job never leaves a
half-written figure. Models of different depth share one axis: x is the layer index, or the relative
depth layer / L when ``relative_depth`` is set (config ``figures.x_axis``). Confidence bands are drawn
wherever the tables have intervals; null controls are grey reference lines.
"""

from __future__ import annotations

import os
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


def _style(index: int) -> dict:
    """Colour and marker of the index-th model: distinct for up to 10 models, then cycling."""
    colors = plt.get_cmap("tab10").colors
    return {"color": colors[index % len(colors)], "marker": MARKERS[index % len(MARKERS)]}


def _x(layers: np.ndarray, depth: int, relative_depth: bool) -> np.ndarray:
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


def _save(fig, png: str | os.PathLike, pdf: str | os.PathLike) -> tuple[Path, Path]:
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
        x = _x(s["layer"].to_numpy(), depth, relative_depth)
        style = _style(i)
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
    return _save(fig, png, pdf)


def plot_anisotropy(
    layer_tables: dict[str, pd.DataFrame], labels: dict[str, str], png, pdf, *, relative_depth: bool = False
) -> tuple[Path, Path]:
    """Figure 1: average cosine between randomly sampled words (the anisotropy baseline) per layer."""
    return _line_figure("anisotropy", "baseline_cosine", None, None, layer_tables, labels, png, pdf, relative_depth)


def plot_self_similarity(
    layer_tables: dict[str, pd.DataFrame], labels: dict[str, str], png, pdf, *, relative_depth: bool = False
) -> tuple[Path, Path]:
    """Figure 2: average self-similarity minus the baseline per layer, with its CI band."""
    return _line_figure(
        "self_similarity",
        "adjusted_self_similarity",
        ("self_similarity_ci_low", "self_similarity_ci_high"),
        "baseline_cosine",
        layer_tables,
        labels,
        png,
        pdf,
        relative_depth,
    )


def plot_intra_sentence(
    layer_tables: dict[str, pd.DataFrame], labels: dict[str, str], png, pdf, *, relative_depth: bool = False
) -> tuple[Path, Path]:
    """Figure 3: average intra-sentence similarity minus the baseline per layer, with its CI band."""
    return _line_figure(
        "intra_sentence",
        "adjusted_intra_sentence",
        ("intra_sentence_ci_low", "intra_sentence_ci_high"),
        "baseline_cosine",
        layer_tables,
        labels,
        png,
        pdf,
        relative_depth,
    )


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
        x = _x(s["layer"].to_numpy(), model_depth(layer_tables[model]), relative_depth) + (rank - (n - 1) / 2) * width
        style = _style(i)
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
    return _save(fig, png, pdf)


_PLOTTERS = {
    "anisotropy": plot_anisotropy,
    "self_similarity": plot_self_similarity,
    "intra_sentence": plot_intra_sentence,
    "mev": plot_mev,
}
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


# --------------------------------------------------------------------------------------------------
# Per model: the geometry dashboard and the rogue dimensions across layers

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


def legend_below(ax, fontsize: float = 9, ncol: int = 1) -> None:
    """The axes' legend below it, outside the data, in text a report page can read (none without labels)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=ncol)


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
    x = _x(t["layer"].to_numpy(), depth, relative_depth)
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
    return _save(fig, png, pdf)


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
    layer_x = _x(t["layer"].to_numpy(), depth, relative_depth)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), layout="constrained")
    dims = top_rogue_dimensions(rogue, per_layer, limit)
    total = _col(t, "rogue_anisotropy")
    left.plot(
        layer_x, total, color="black", linewidth=2.0, marker="o", markersize=4, label="the anisotropy (all dimensions)"
    )
    followed = np.zeros(len(t))
    for i, dim in enumerate(dims):
        series = rogue[rogue["dimension"] == dim].set_index("layer").reindex(t["layer"])
        style = _style(i)
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
    return _save(fig, png, pdf)
