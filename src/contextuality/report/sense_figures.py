"""The sense figures across models, one panel per model: sense separation, its shape baselines, the logit
lens and polysemy (their names in ``senses.combine.SENSE_FIGURES``; the claims on the same tables in
``report.senses``)."""

from __future__ import annotations

import pandas as pd

from contextuality.report.figure_files import FORMATS, save_figure
from contextuality.report.senses import layer_series
from contextuality.senses.combine import SENSE_FIGURES


def sense_figures(
    tables: dict[str, pd.DataFrame], labels: dict[str, str], outputs: dict[str, str], x_axis: str
) -> None:
    """sense_separation, logit_lens and polysemy (png and pdf), one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contextuality.report.figures import legend_below, plain_text

    drawers = _drawers()
    for name in SENSE_FIGURES:
        drawn, left_out = tables, {}
        if name == "logit_lens":  # a panel only for a model with an output layer; the others named below the figure
            drawn = {model: table for model, table in tables.items() if _has_lens(table)}
            left_out = {model: table for model, table in tables.items() if model not in drawn}
            drawn = drawn or tables  # none has one: their notes in the panels
            left_out = {} if drawn is tables else left_out
        panels = max(len(drawn), 1)
        fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.8), squeeze=False, layout="constrained")
        for ax, (model, table) in zip(axes[0], drawn.items()):
            depth = max(int(table["layer"].max()), 1)
            scale = (lambda s, depth=depth: s.index / depth) if x_axis == "relative_depth" else (lambda s: s.index)
            drawers[name](ax, table, scale)
            legend_below(ax, fontsize=8, ncol=1)
            ax.set_title(plain_text(labels.get(model, model)))
            ax.set_xlabel("relative depth" if x_axis == "relative_depth" else "layer")
        if left_out:
            fig.supxlabel(
                "Not drawn, without an output layer: "
                + "; ".join(
                    f"{plain_text(labels.get(model, model))} ({_lens_note(table)})" for model, table in left_out.items()
                ),
                fontsize=8,
                wrap=True,
            )
        save_figure(fig, {ext: outputs[f"{name}_{ext}"] for ext in FORMATS}, dpi=120)
        plt.close(fig)


def _drawers() -> dict:
    """Each sense figure's drawer of one model's panel, by its name in ``SENSE_FIGURES``."""
    return {
        "sense_separation": _draw_separation,
        "sense_baselines": _draw_baselines,
        "logit_lens": _draw_lens,
        "polysemy": _draw_polysemy,
    }


def _draw_separation(ax, table: pd.DataFrame, scale) -> None:
    """AUROC of same- vs different-sense pairs per layer (chance 0.5), with the 95% interval; layer 0 is the control."""
    for kind, style in (("centred", "-"), ("standardised", "--")):
        auroc = layer_series(table, "auroc_same_sense", kind)
        if auroc.notna().any():
            low, high = (
                layer_series(table, "auroc_same_sense", kind, "ci_low"),
                layer_series(table, "auroc_same_sense", kind, "ci_high"),
            )
            ax.plot(scale(auroc), auroc, style, marker="o", ms=3, label=f"AUROC, {kind}")
            ax.fill_between(scale(auroc), low, high, alpha=0.2)
            ax.plot(
                scale(auroc)[:1],
                auroc.iloc[:1],
                "ks",
                ms=6,
                label="layer 0 (surface-form control)" if kind == "centred" else None,
            )
    ax.axhline(0.5, color="grey", lw=1, label="chance (label-permutation null)")
    ax.set_ylabel("same- vs different-sense AUROC")


def _draw_baselines(ax, table: pd.DataFrame, scale) -> None:
    """W3a at its real size (centred): the cosine AUROC, within strata of the length difference, the shape-only and
    cosine + shape AUROCs held out by lemma, and the held-out balanced accuracy beside shape alone's, the cosine's,
    the shape's and the accuracy's with their 95% intervals."""
    for measure, label, style, band in (
        ("auroc_same_sense", "cosine AUROC", "-", True),
        ("auroc_stratified", "cosine AUROC within |ΔL| strata", "-", False),
        ("auroc_cosine_shape", "cosine + shape AUROC (held out)", "-", False),
        ("auroc_shape", "shape alone, no model (held out)", "--", True),
        ("heldout_balanced_accuracy", "balanced accuracy, threshold held out", ":", True),
        ("heldout_balanced_accuracy_shape", "balanced accuracy of shape alone (held out)", "-.", False),
    ):
        value = layer_series(table, measure, "centred")
        if not value.notna().any():
            continue
        line = ax.plot(scale(value), value, style, marker="o" if style == "-" else None, ms=3, label=label)[0]
        if band:  # the intervals of the three that answer the question: the cosine, the shape, the accuracy
            low, high = (
                layer_series(table, measure, "centred", "ci_low"),
                layer_series(table, measure, "centred", "ci_high"),
            )
            ax.fill_between(scale(value), low, high, alpha=0.12, color=line.get_color())
    ax.axhline(0.5, color="grey", lw=1, label="chance")
    ax.set_ylabel("AUROC / balanced accuracy (centred)")


def _has_lens(table: pd.DataFrame) -> bool:
    """Whether a model's sense table holds logit-lens ranks (a model with an output layer)."""
    return any(
        layer_series(table, f"{name}_median_rank", "hidden").notna().any() for name in ("next_token", "own_token")
    )


def _lens_note(table: pd.DataFrame) -> str:
    notes = table[table["family"] == "output_layer"]["note"].dropna() if "note" in table else []
    return notes.iloc[0] if len(notes) else "not measured"


def _draw_lens(ax, table: pd.DataFrame, scale) -> None:
    """Median rank of the next token and of the token itself under the output layer, against unigram frequency."""
    drawn = False
    for name in ("next_token", "own_token"):
        rank = layer_series(table, f"{name}_median_rank", "hidden")
        if rank.notna().any():
            drawn = True
            line = ax.plot(scale(rank), rank + 1, marker="o", ms=3, label=f"{name.replace('_', ' ')}")[0]
            null = layer_series(table, f"{name}_median_rank", "hidden", "null") + 1
            ax.plot(scale(null), null, ":", color=line.get_color(), label=f"{name.replace('_', ' ')}: unigram baseline")
    if not drawn:
        ax.text(
            0.5,
            0.5,
            _lens_note(table).replace(": ", ":\n", 1),
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=8,
            wrap=True,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_yscale("log")
    ax.set_ylabel("median rank + 1 (logit lens)")


def _draw_polysemy(ax, table: pd.DataFrame, scale) -> None:
    """Standardised effect of log sense count on self-similarity, with and without context diversity; and diversity's."""
    for measure, label in (
        ("beta_log_synsets", "log senses | diversity"),
        ("beta_log_synsets_without_diversity", "log senses alone"),
        ("beta_context_diversity", "context diversity"),
    ):
        beta = layer_series(table, measure, "centred")
        if beta.notna().any():
            low, high = (
                layer_series(table, measure, "centred", "ci_low"),
                layer_series(table, measure, "centred", "ci_high"),
            )
            ax.plot(scale(beta), beta, marker="o", ms=3, label=label)
            ax.fill_between(scale(beta), low, high, alpha=0.2)
    ax.axhline(0, color="grey", lw=1)
    ax.set_ylabel("standardised beta on self-similarity (centred)")
