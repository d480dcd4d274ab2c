"""A layer's geometry panel: every scalar geometry column of one layer at once (``spec/geometry-metrics.md``).

One implementation (``panel_row``) serves both the reference definition ``geometry_panel`` (which
computes the rogue dimensions from the rows) and the measurement job (which takes them from its
layer pass, ``layer_pass.rogue_summary``: the same numbers without a second read).

Columns: rogue_anisotropy (the sum of the contributions: A, or A_p with weights), rogue_top1_share,
rogue_top3_share, rogue_top10_share (NaN when the anisotropy is not above 3 standard deviations of its
isotropic null, see ``rogue.rogue_shares``), rogue_dims (up to ten dimensions with positive
contribution, largest first, e.g. "588,12,3"; "" when the shares are NaN), massive_dims (ascending, ""
if none), massive_occurrences, massive_top_units (JSON list of [unit, count], most first; "" if none or
without ``units``/``positions``), massive_first_position_share, massive_first_position_rate (see
``rogue.massive_carriers``; NaN without them), pc1_ratio, effective_rank, isoscore, isoscore_star,
twonn_dimension, twonn_duplicate_fraction, then null_gaussian_* and null_permuted_* for the five
isotropy measures, twonn_duplicate_fraction and rogue_top1_share, and geometry_sample (the rows the
isotropy measures were taken on).
"""

from __future__ import annotations

import json

import numpy as np

from contextuality.measure.engine.rogue import (
    MASSIVE_ABSOLUTE,
    MASSIVE_RELATIVE,
    MassiveActivations,
    RogueSummary,
    massive_activations,
    massive_carriers,
    rogue_dimensions,
)  # fmt: skip
from contextuality.measure.reference.isotropy import (
    TWONN_DISCARD_FRACTION,
    gaussian_null,
    isotropy_measures,
    permuted_null,
    sample_rows,
)  # fmt: skip

# The isotropy measures of isotropy.isotropy_measures, and the columns of its null controls.
ISOTROPY_COLUMNS = [
    "pc1_ratio",
    "effective_rank",
    "isoscore",
    "isoscore_star",
    "twonn_dimension",
    "twonn_duplicate_fraction",
]
NULL_COLUMNS = [
    f"null_{null}_{column}" for null in ("gaussian", "permuted") for column in ISOTROPY_COLUMNS + ["rogue_top1_share"]
]
GEOMETRY_COLUMNS = [
    "rogue_anisotropy", "rogue_top1_share", "rogue_top3_share", "rogue_top10_share", "rogue_dims",
    "massive_dims", "massive_occurrences", "massive_top_units", "massive_first_position_share",
    "massive_first_position_rate", *ISOTROPY_COLUMNS, *NULL_COLUMNS, "geometry_sample",
]  # fmt: skip
GEOMETRY_TEXT_COLUMNS = ("rogue_dims", "massive_dims", "massive_top_units")


def geometry_panel(
    X: np.ndarray,
    rng: np.random.Generator,
    sample_size: int,
    weights: np.ndarray | None = None,
    units=None,
    positions: np.ndarray | None = None,
    **options,
) -> dict:
    """Every geometry column of one layer (``GEOMETRY_COLUMNS``), as a flat dict of scalars; ``options``:
    ``panel_row``'s keywords (the massive-activation thresholds, TwoNN's discarded fraction and sample size).

    Over all N rows of X: the rogue-dimension shares of the exact anisotropy (weighted by ``weights``
    when given, e.g. the paper's p_i = 1 / (S len(s_i)); see ``rogue.rogue_contributions``) and the
    massive activations. On ``sample_size`` rows drawn with ``rng``: the isotropy measures (TwoNN on
    ``twonn_sample_size`` of them if given, see ``isotropy.isotropy_measures``). The same measures
    and the rogue top-1 share (unweighted) are computed on two nulls of the sample's shape: an
    isotropic Gaussian and the sample with each dimension permuted across rows. ``rng`` is used in a
    fixed order (sample, Gaussian, permutation), so a seed fixes every number.

    Cost (CPU seconds on one core, 300k x 384 float16): the rogue pass 0.4 (mostly converting float16),
    massive activations 0.05 (0.4 when some |x| > 100, for the exact median), and about 0.7 for each
    of the three isotropy blocks on 5,000 rows, nearly all of it TwoNN's exact neighbour search
    (N^2 d): 3.3 in all, 1.6 with ``twonn_sample_size=2000``.
    """
    return panel_row(X, rogue_dimensions(X, weights), rng, sample_size, units, positions, **options)


def panel_row(
    X: np.ndarray,
    rogue: RogueSummary,
    rng: np.random.Generator,
    sample_size: int,
    units=None,
    positions: np.ndarray | None = None,
    *,
    massive_absolute: float = MASSIVE_ABSOLUTE,
    massive_relative: float = MASSIVE_RELATIVE,
    twonn_discard_fraction: float = TWONN_DISCARD_FRACTION,
    twonn_sample_size: int | None = None,
    massive: MassiveActivations | None = None,
    sample: np.ndarray | None = None,
) -> dict:
    """``geometry_panel``'s row of X with its rogue dimensions given (``rogue.rogue_dimensions`` of X).

    A layer read in blocks passes X as None, with its ``massive`` activations
    (``rogue.massive_activations_blocks``) and its ``sample`` rows, drawn with
    ``isotropy.sample_indices(n, rng, sample_size)`` from the same ``rng`` before it is passed here."""
    row = _rogue_columns(rogue)
    if massive is None:
        massive = massive_activations(X, massive_absolute, massive_relative)
    row.update(_massive_columns(massive, units, positions))
    if sample is None:
        sample = sample_rows(X, rng, sample_size)
    row.update(_sample_columns(sample, rng, twonn_discard_fraction, twonn_sample_size))
    return row


def empty_panel() -> dict:
    """The panel's row of a layer measured without it: NaN, "" in the text columns, 0 rows counted."""
    row = {column: ("" if column in GEOMETRY_TEXT_COLUMNS else float("nan")) for column in GEOMETRY_COLUMNS}
    row["massive_occurrences"] = row["geometry_sample"] = 0
    return row


def _indices(values) -> str:
    return ",".join(str(int(v)) for v in values)


def _rogue_columns(rogue: RogueSummary) -> dict:
    return {
        "rogue_anisotropy": rogue.total,
        "rogue_top1_share": rogue.shares[1],
        "rogue_top3_share": rogue.shares[3],
        "rogue_top10_share": rogue.shares[10],
        "rogue_dims": _indices(rogue.top_dims),
    }


def _massive_columns(massive: MassiveActivations, units, positions) -> dict:
    """The massive activations over every row, and which units carry them (with ``units`` and ``positions``)."""
    row = {
        "massive_dims": _indices(massive.dims),
        "massive_occurrences": massive.n_occurrences,
        "massive_top_units": "",
        "massive_first_position_share": float("nan"),
        "massive_first_position_rate": float("nan"),
    }
    if units is not None and positions is not None:
        carriers = massive_carriers(massive.rows, units, positions)
        row["massive_top_units"] = json.dumps(carriers.top_units, ensure_ascii=False) if carriers.top_units else ""
        row["massive_first_position_share"] = carriers.first_position_share
        row["massive_first_position_rate"] = carriers.first_position_rate
    return row


def _sample_columns(sample, rng, twonn_discard_fraction: float, twonn_sample_size: int | None) -> dict:
    """The isotropy measures of a sample of rows and of its two nulls; ``rng`` (the sample drawn from it):
    Gaussian, permutation."""
    sample = np.asarray(sample, dtype=np.float64)
    gaussian = gaussian_null(len(sample), sample.shape[1], rng)
    permuted = permuted_null(sample, rng)
    row = isotropy_measures(sample, twonn_discard_fraction, twonn_sample_size)
    for prefix, null in (("null_gaussian_", gaussian), ("null_permuted_", permuted)):
        measures = isotropy_measures(null, twonn_discard_fraction, twonn_sample_size)
        row.update({prefix + key: value for key, value in measures.items()})
        row[prefix + "rogue_top1_share"] = rogue_dimensions(null).shares[1]
    row["geometry_sample"] = len(sample)
    return row
