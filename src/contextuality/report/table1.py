"""Table 1: this run's static embeddings beside the paper's, as CSV, Markdown and LaTeX, and a figure."""

from __future__ import annotations

import math
import os

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from contextuality.core.atomic import atomic_path
from contextuality.paper import PAPER_TABLE1, TABLE1_HEADERS, TABLE1_TASKS
from contextuality.report import tables
from contextuality.report.figure_files import save_figure
from contextuality.report.figures import plain_text
from contextuality.static.scoring import TASK_METRIC


def _method_label(model: str, layer: float) -> str:
    """``GloVe`` for a baseline (no layer), ``BERT, Layer 1`` for a layer's PC embedding."""
    return model if pd.isna(layer) else f"{model}, Layer {int(layer)}"


def _ordered_methods(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, layer): baselines first, then models in order of appearance by layer."""
    methods = results[["model", "layer"]].drop_duplicates().reset_index(drop=True)
    first_seen = {m: i for i, m in reversed(list(enumerate(methods["model"])))}
    methods["_baseline"] = methods["layer"].notna()
    methods["_model_order"] = methods["model"].map(first_seen)
    methods = methods.sort_values(["_baseline", "_model_order", "layer"], kind="stable")
    methods["method"] = [_method_label(m, layer) for m, layer in zip(methods["model"], methods["layer"])]
    return methods[["method", "model", "layer"]].reset_index(drop=True)


def _wide(results: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """Scores and coverages of this run, one row per method, in table order."""
    methods = _ordered_methods(results)
    keyed = results.assign(method=[_method_label(m, layer) for m, layer in zip(results["model"], results["layer"])])
    scores = keyed.pivot_table(index="method", columns="task", values="score", aggfunc="first", dropna=False)
    cover = keyed.pivot_table(index="method", columns="task", values="coverage", aggfunc="first", dropna=False)
    table = methods.assign(source="this run")
    for task in tasks:
        table[task] = table["method"].map(scores[task]) if task in scores else math.nan
    for task in tasks:
        table[f"coverage_{task}"] = table["method"].map(cover[task]) if task in cover else math.nan
    return table


def _bold_mask(block: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """True where a value equals its column's best (as displayed, so ties are all bold)."""
    shown = block[tasks].astype(float).round(3)
    return shown.eq(shown.max(axis=0)) & shown.notna()


def build_table1(
    results: pd.DataFrame,
    out_csv: str | os.PathLike,
    out_md: str | os.PathLike,
    out_tex: str | os.PathLike,
    include_paper: bool = True,
) -> pd.DataFrame:
    """Write Table 1 as CSV, Markdown and LaTeX; return the CSV's table.

    ``results`` has one row per (model, layer, task) with columns ``model`` (display label),
    ``layer`` (NaN for a baseline such as GloVe), ``task``, ``score`` and ``coverage``. The best
    value per column among this run's rows is bold; the paper's rows (its Table 1) follow as a
    separate, unbolded reference block. The CSV also holds the coverage of every cell.
    """
    tasks = [t for t in TABLE1_TASKS if t in set(results["task"])]
    tasks += [t for t in dict.fromkeys(results["task"]) if t not in tasks]
    run = _wide(results, tasks)
    paper = (
        pd.DataFrame(
            [
                {
                    "method": label,
                    "model": label.split(",")[0],
                    "layer": float(label.split("Layer ")[1]) if "Layer" in label else math.nan,
                    "source": "paper",
                    **{t: values.get(t, math.nan) for t in tasks},
                }
                for label, values in PAPER_TABLE1.items()
            ]
        )
        if include_paper
        else run.iloc[:0]
    )
    table = pd.concat([run, paper], ignore_index=True)[
        ["source", "method", "model", "layer", *tasks, *[f"coverage_{t}" for t in tasks]]
    ]
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")

    metrics = ", ".join(f"{TABLE1_HEADERS.get(t, t)}: {TASK_METRIC.get(t, 'score')}" for t in tasks)
    header = {"method": "Static embedding", **{t: TABLE1_HEADERS.get(t, t) for t in tasks}}

    def shown(block: pd.DataFrame) -> pd.DataFrame:
        return block[["method", *tasks]].rename(columns=header).reset_index(drop=True)

    bold = _bold_mask(run, tasks).rename(columns=header).reset_index(drop=True)
    md = [
        "Table 1: static embeddings on word benchmarks; best of this run in bold.",
        "",
        f"Metrics: {metrics}.",
        "",
        tables.markdown(shown(run), bold),
    ]
    tex = [
        tables.latex(
            shown(run),
            bold,
            caption="Static embeddings on word benchmarks (this run; best in bold).",
            label="tab:table1",
        )
    ]
    if include_paper:
        md += ["", "Paper (Ethayarajh 2019, Table 1), for reference:", "", tables.markdown(shown(paper))]
        tex += [
            tables.latex(
                shown(paper), caption="The paper's Table 1 (Ethayarajh 2019), for reference.", label="tab:table1-paper"
            )
        ]
    tables.write_text(out_md, "\n".join(md) + "\n")
    tables.write_text(out_tex, "% Needs \\usepackage{booktabs}.\n" + "\n".join(tex))
    return table


def plot_scores_by_layer(results: pd.DataFrame, out_png: str | os.PathLike, out_pdf: str | os.PathLike) -> None:
    """One panel per task, score against layer, one line per model.

    Layer 0 (the input embeddings) is drawn as an open square; baselines without a layer
    (GloVe, FastText) are horizontal dashed lines. ``results`` is as for :func:`build_table1`.
    """
    tasks = [t for t in TABLE1_TASKS if t in set(results["task"])]
    tasks += [t for t in dict.fromkeys(results["task"]) if t not in tasks]
    layered = results[results["layer"].notna()]
    baselines = results[results["layer"].isna()]
    models = list(dict.fromkeys(layered["model"]))
    colors = [f"C{i % 10}" for i in range(len(models) + baselines["model"].nunique())]
    ncols = min(3, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.1 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, task in zip(axes, tasks):
        for i, model in enumerate(models):
            s = layered[(layered["model"] == model) & (layered["task"] == task)].sort_values("layer")
            ax.plot(s["layer"], s["score"], marker="o", markersize=3.5, linewidth=1.5, color=colors[i])
            zero = s[s["layer"] == 0]
            ax.plot(
                zero["layer"],
                zero["score"],
                linestyle="none",
                marker="s",
                markersize=7,
                markerfacecolor="white",
                markeredgecolor=colors[i],
                markeredgewidth=1.5,
            )
        for j, model in enumerate(dict.fromkeys(baselines["model"])):
            s = baselines[(baselines["model"] == model) & (baselines["task"] == task)]
            if len(s):
                ax.axhline(float(s["score"].iloc[0]), linestyle="--", linewidth=1.2, color=colors[len(models) + j])
        ax.set_title(f"{TABLE1_HEADERS.get(task, task)} ({TASK_METRIC.get(task, 'score')})", fontsize=10)
        ax.set_xlabel("Layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3, linewidth=0.6)
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    handles = [
        Line2D([], [], color=colors[i], marker="o", markersize=4, label=plain_text(m)) for i, m in enumerate(models)
    ]
    handles += [
        Line2D([], [], color=colors[len(models) + j], linestyle="--", label=plain_text(m))
        for j, m in enumerate(dict.fromkeys(baselines["model"]))
    ]
    handles.append(
        Line2D(
            [],
            [],
            linestyle="none",
            marker="s",
            markerfacecolor="white",
            markeredgecolor="black",
            label="layer 0 (input embeddings)",
        )
    )
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    fig.suptitle("Static (first principal component) embeddings on word benchmarks, by layer")
    save_figure(fig, {"png": out_png, "pdf": out_pdf}, dpi=150)
