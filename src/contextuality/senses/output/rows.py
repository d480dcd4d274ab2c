"""The output layer's measures as rows of a model's sense table: B1/B2's rank summaries, B4/B5's alignments and
their paired comparison, and the centroids they rank; shared by ``output.layer`` (the stored occurrences) and
``output.masked`` (a masked LM's masked passes)."""

from __future__ import annotations

import numpy as np


def add_rank_rows(rows, name: str, ranks, baseline, note: str) -> None:
    """B1/B2's four summaries of ``ranks`` (``{name}_top1`` ...), each beside the same summary of ``baseline``."""
    from contextuality.senses.output import lens

    summary, null = lens.rank_summary(ranks), lens.rank_summary(baseline)
    for stat in ("top1", "top10", "median_rank", "mean_log2_rank"):
        rows.add("output_layer", f"{name}_{stat}", "hidden", summary[stat], null=null[stat], n=summary["n"], note=note)


def centroids_of(x, members: tuple, k: int) -> np.ndarray:
    """The mean (k × d, float32) of x's rows per code 0..k-1 (``members``: rows, codes), summed in float64."""
    rows, codes = members
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, codes, x[rows].astype(np.float64))
    return (sums / np.maximum(np.bincount(codes, minlength=k), 1)[:, None]).astype(np.float32)


def add_alignment_rows(rows, prefix: str, result: dict, note: str) -> None:
    """``{prefix}_median_rank``, ``_share_rank_lt_10`` and ``_mean_cos`` of a ``centroid_alignment`` result."""
    summary, n = result["summary"], result["summary"]["n"]
    for measure, stat, extra in (("median_rank", "median_rank", ""),
                                 ("share_rank_lt_10", "share_rank_lt_10", f"; chance {summary['chance_share']:.2g}"),
                                 ("mean_cos", "mean_cos", "")):  # fmt: skip
        rows.add("output_layer", f"{prefix}_{measure}", "centred", summary[stat], null=summary[f"null_{stat}"], n=n,
                 note=note + extra)  # fmt: skip


def add_paired_rows(rows, prefix: str, ranks, other, what: str) -> None:
    """Two ranks of the same items compared paired: ``{prefix}_median_difference`` (the median of ranks - other,
    p: Wilcoxon's signed-rank test, two-sided) and ``{prefix}_share_lower`` (the share where ranks < other,
    i.e. the first ranks its row higher; null: the share the other way, ties the rest)."""
    from scipy.stats import wilcoxon

    ranks, other = np.asarray(ranks, dtype=np.float64), np.asarray(other, dtype=np.float64)
    difference = ranks - other
    p = wilcoxon(ranks, other).pvalue if np.any(difference != 0) else 1.0
    n = difference.size
    rows.add("output_layer", f"{prefix}_median_difference", "centred", np.median(difference), p=p, n=n,
             note=f"{what}, per item (paired); p: Wilcoxon signed-rank")  # fmt: skip
    rows.add("output_layer", f"{prefix}_share_lower", "centred", np.mean(ranks < other), null=np.mean(ranks > other),
             n=n, note=f"{what}: the share below 0 (null: above 0; ties the rest)")  # fmt: skip
