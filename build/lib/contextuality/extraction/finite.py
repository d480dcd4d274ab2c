"""Finite vectors only: what the shard writer's check says of a block holding a NaN or an infinity.

The check runs in the writer thread on each window's rows, in the storage dtype, before they are written:
one reduction per block (its min and max, NaN if any value is: ``writer.block_extent``, or the device's
for a CUDA block). Only a refused block is searched, for its first non-finite value, which is named with its
layer, sentence and unit. float16 storage turns an activation beyond its range (|x| > 65504) into an
infinity at the cast, so an infinity there is named as that overflow.
"""

from __future__ import annotations

import numpy as np

from contextuality.extraction.alignment import Plan
from contextuality.extraction.writer import RefusedRows, block_extent

FLOAT16_MAX = float(np.finfo(np.float16).max)


class NonFiniteError(RefusedRows):
    """A stored vector would hold a NaN or an infinity (from the model, or float16 overflow at the storage cast)."""


def finite_check(plan: Plan, out_h5, model: str, shard: int, storage_dtype: str):
    """The shard writer's check of each block before it is written: a NaN or an infinity raises
    ``NonFiniteError``, one line naming the file, model, shard, layer, sentence and unit."""

    def check(block, rows: np.ndarray, first_row: int) -> None:
        message = non_finite_message(block, rows, first_row, plan, storage_dtype)
        if message:
            raise NonFiniteError(f"{out_h5}: model '{model}', shard {shard}, {message}")

    return check


def non_finite_message(block, rows: np.ndarray, first_row: int, plan: Plan, storage_dtype: str) -> str | None:
    """None if every value of ``block`` (rows ``rows``, (layers, n, dim), from the shard's row ``first_row``)
    is finite; else what is wrong, where, and the way out: "layer L, sentence S (unit ..., row R of the
    shard): the vector holds ..."."""
    low, high = block.extent() if hasattr(block, "extent") else block_extent(rows)
    if np.isfinite(low) and np.isfinite(high):
        return None
    bad = ~np.isfinite(rows)
    layer = int(np.flatnonzero(bad.any(axis=(1, 2)))[0])
    row = int(np.flatnonzero(bad[layer].any(axis=1))[0])
    value = rows[layer, row][bad[layer, row]][0]
    unit = first_row + row
    sentence = int(np.searchsorted(plan.unit_offsets, unit, side="right") - 1)
    if np.isinf(value) and storage_dtype == "float16":
        why = (f"{value} after the cast to float16: an activation beyond float16's range (|x| > {FLOAT16_MAX:g}), "
               "or infinite in the model; nothing was stored (set extraction.storage_dtype: float32, or use a model "
               "whose activations stay within float16)")  # fmt: skip
    else:
        why = (f"{value} from the model's forward pass; nothing was stored (check the model's weights, or its "
               "extraction.compute_dtype: float16 and bfloat16 overflow where float32 does not)")  # fmt: skip
    return (f"layer {layer}, sentence {int(plan.sentence_ids[sentence])} (unit {plan.units['unit'].iat[unit]!r}, "
            f"row {unit} of the shard): the vector holds {why}")  # fmt: skip
