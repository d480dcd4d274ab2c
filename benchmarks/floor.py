"""The products floor (f) of the exact measures, shared by ``bench_metrics.py`` and ``bench_scaling.py``.

The exact measures are built on two kinds of BLAS products: the layer's second moment (one X^T X over all
rows: the exact MEV baseline) and every word's Gram (n <= d occurrences) or scatter matrix (n > d: its
MEV), small words stacked by size as ``word_stats.word_stats`` stacks them. ``products`` does those and
nothing else (no eigen-solve, cosine sum, variant or panel), so its time is what the method cannot go below.
"""

from __future__ import annotations

import numpy as np

from contextuality.measure.engine.layer_pass import BLOCK_ROWS
from contextuality.measure.engine.word_stats import BATCH_ELEMENTS, STACK_MAX


def products(X: np.ndarray, rows: np.ndarray, group_starts: np.ndarray) -> None:
    """X^T X over every row of X (blocks of ``BLOCK_ROWS``) and each word's Gram or scatter matrix."""
    n_rows, d = X.shape
    second = np.zeros((d, d), dtype=X.dtype)
    for start in range(0, n_rows, BLOCK_ROWS):  # the layer's second moment: the exact MEV baseline
        block = X[start : start + BLOCK_ROWS]
        second += block.T @ block
    sizes = np.diff(np.append(group_starts, len(rows)))
    for size in np.unique(sizes[sizes <= STACK_MAX]):  # small words stacked by size, as word_stats does
        chosen = np.flatnonzero(sizes == size)
        per_batch = max(1, BATCH_ELEMENTS // (int(size) * d))
        for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
            block = X[rows[group_starts[batch, None] + np.arange(size)]]
            np.matmul(block, np.swapaxes(block, 1, 2))
    for word in np.flatnonzero(sizes > STACK_MAX):  # each larger word's Gram (n <= d) or scatter (n > d) matrix
        block = X[rows[group_starts[word] : group_starts[word] + sizes[word]]]
        _ = block @ block.T if len(block) <= d else block.T @ block


def products_flops(n_rows: int, d: int, sizes) -> float:
    """Floating-point operations ``products`` executes: N d^2 for X^T X, and per word of n occurrences
    n min(n, d) d (its Gram matrix, n^2 d, or its scatter matrix, n d^2). Each is a matrix times its own
    transpose, which numpy hands to BLAS's syrk (also slice by slice in a stack): one multiply and one add
    per entry of the upper triangle, half of a general product's 2 m n k."""
    sizes = np.asarray(sizes, dtype=np.float64)
    return float(n_rows) * d * d + float(np.sum(sizes * np.minimum(sizes, d) * d))
