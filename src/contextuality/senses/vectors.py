"""Vector preprocessing for the sense measures: raw, centred, standardised; unit rows.

``layer_moments`` gives a layer's mean and per-dimension standard deviation over all its rows, streamed
over row blocks in float64, so a caller never holds a whole layer in float64.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

KINDS = ("raw", "centred", "standardised")


def preprocess(x: np.ndarray, mean: np.ndarray, std: np.ndarray, kind: str) -> np.ndarray:
    """x as float64 after ``kind``: "raw" (x), "centred" (x − mean), "standardised" ((x − mean)/std).

    A dimension whose std is 0 stays 0 after standardising (it carries no variation; no division by 0).
    """
    if kind not in KINDS:
        raise ValueError(f"preprocess: kind {kind!r} is not one of {KINDS}; pass one of them")
    x = np.asarray(x, dtype=np.float64)
    if kind == "raw":
        return x.copy()
    mean = np.asarray(mean, dtype=np.float64)
    if mean.shape != x.shape[-1:]:
        raise ValueError(
            f"preprocess: mean has shape {mean.shape}, the rows have {x.shape[-1]} dimensions; pass the layer's moments"
        )
    centred = x - mean
    if kind == "centred":
        return centred
    std = np.asarray(std, dtype=np.float64)
    if std.shape != mean.shape:
        raise ValueError(f"preprocess: std has shape {std.shape}, mean {mean.shape}; pass the layer's moments")
    scale = np.where(std > 0, std, 1.0)
    return np.where(std > 0, centred / scale, 0.0)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of x scaled to unit Euclidean norm, float64; a zero row stays zero (NaN rows stay NaN)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=(norms > 0) | np.isnan(norms))


def layer_moments(blocks: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) over all rows of the blocks, float64; std is the population sd (ddof 0).

    Blocks are merged with Chan et al.'s pairwise update, which keeps the variance accurate when the mean
    is large against the spread (a plain sum of squares would cancel).
    """
    n, mean, m2 = 0, None, None
    for block in blocks:
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2:
            raise ValueError(f"layer_moments: a block has shape {block.shape}; pass 2-d row blocks")
        k = block.shape[0]
        if k == 0:
            continue
        b_mean = block.mean(axis=0)
        b_m2 = ((block - b_mean) ** 2).sum(axis=0)
        if mean is None:
            n, mean, m2 = k, b_mean, b_m2
            continue
        if b_mean.shape != mean.shape:
            raise ValueError(
                f"layer_moments: a block has {b_mean.shape[0]} dimensions, earlier ones "
                f"{mean.shape[0]}; pass blocks of one layer"
            )
        total = n + k
        delta = b_mean - mean
        mean = mean + delta * (k / total)
        m2 = m2 + b_m2 + delta**2 * (n * k / total)
        n = total
    if mean is None:
        raise ValueError("layer_moments: no rows; pass at least one non-empty block")
    return mean, np.sqrt(m2 / n)
