"""Sentences of the word-senses findings for measures a run may not have (newer ones): each is written only where
its rows are in the run's ``senses/layers.csv``. To add one: a function of the models that have the measure, and
an entry under its claim in ``OPTIONAL``."""

from __future__ import annotations

from collections.abc import Callable

from contextuality.report.findings_run import Model, each, measured
from contextuality.report.sense_table import format_p
from contextuality.report.tables import fmt, fmt_ci, fmt_share, fmt_signed, fmt_span


def gain_over_shape(models: list[Model]) -> str:
    def one(m: Model) -> str | None:
        row = measured(m, "auroc_gain_over_shape")
        return None if row is None else f"{fmt_signed(row['value'], 3)} {fmt_ci(row['ci_low'], row['ci_high'])}"

    return f"The model's gain over shape (cosine + shape against shape alone, paired over lemma resamples): {each(models, one)}."


def heldout_shape(models: list[Model]) -> str:
    def one(m: Model) -> str | None:
        row = measured(m, "heldout_balanced_accuracy_shape")
        return None if row is None else fmt(row["value"])

    return f"The same held-out design on shape features alone gives a balanced accuracy of {each(models, one)}."


def two_senses(models: list[Model]) -> str:
    def one(m: Model) -> str | None:
        rows = m.sense_rows("delta_cluster_index_two_senses").dropna(subset=["value"])
        if rows.empty:
            return None
        seen = rows[(rows["value"] < 0) & (rows["p"] < 0.05)]
        return f"{fmt_span(rows['value'].min(), rows['value'].max())}, detected in {len(seen)} of {len(rows)} layers"

    return (
        "A real-sense positive control, two senses of one lemma on the same token in balanced subsamples: "
        f"{each(models, one)}."
    )


def detectable_share(models: list[Model]) -> str:
    def one(m: Model) -> str | None:
        values = m.sense(DETECTABLE_SHARE).dropna()
        return None if values.empty else fmt_share(values.min())

    return f"By its power, the test would see splits only if at least {each(models, one)} of the polysemous words had them."


def paired_ranks(models: list[Model]) -> str:
    def one(m: Model) -> str | None:
        rows = m.sense_rows(PAIRED_RANKS).dropna(subset=["value"])
        if rows.empty:
            return None
        last = rows.loc[rows.index.max()]
        return f"median {fmt_signed(last['value'], 0)} (Wilcoxon p {format_p(last['p'])})"

    return f"On the same tokens, B5's rank minus B4's at the last layer: {each(models, one)}."


# B4 and B5 ranked on the same tokens (senses/output/layer.py): the paired difference W3c's verdict reads.
PAIRED_RANKS = "prediction_vs_alignment_rank_median_difference"

# The measure of the smallest share of split words the W3b test detects (senses/separation/split_control.py writes it).
DETECTABLE_SHARE = "w3b_detectable_split_share"

# claim -> (measure, sentence of the models that have it), in the order they are written.
OPTIONAL: dict[str, tuple[tuple[str, Callable[[list[Model]], str]], ...]] = {
    "W3a": (("auroc_gain_over_shape", gain_over_shape), ("heldout_balanced_accuracy_shape", heldout_shape)),
    "W3b": (("delta_cluster_index_two_senses", two_senses), (DETECTABLE_SHARE, detectable_share)),
    "W3c": ((PAIRED_RANKS, paired_ranks),),
}
