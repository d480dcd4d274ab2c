"""What the sense job holds beside the rows it is given, in host memory: the one arithmetic of its declaration to
the scheduler (``workflow.estimates``) and, on the device path, of the room its job keeps beside its groups of
layers (``senses.device``). Light on purpose: the Snakefile's process imports it."""

from __future__ import annotations

from contextuality.core.settings import SENSE_LAYER_DTYPE

# Batches of words (about 64 MB each, a few at once, the variants' copies included)
WORD_BATCHES_MB = 6 * 64
# The interpreter and the measures' own tables
WORK_BASE_MB = 1024


def layer_bytes(rows: int, dim: int) -> int:
    """One layer's ``rows`` held whole in ``SENSE_LAYER_DTYPE``, as the measures take them."""
    return rows * dim * (int(SENSE_LAYER_DTYPE.removeprefix("float")) // 8)


def work_bytes(rows: int, dim: int) -> int:
    """The measures of one layer: its ``rows`` (on the device path both corpora's) as float32 host arrays, batches
    of words and the rest (in bytes of 2**20 per MB, as the device job plans)."""
    return layer_bytes(rows, dim) + (WORD_BATCHES_MB + WORK_BASE_MB) * (1 << 20)
