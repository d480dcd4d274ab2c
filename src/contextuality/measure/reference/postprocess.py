"""Post-processing of a layer's vectors (``spec/geometry-metrics.md``): ``standardize`` and ``abtt``.

All-but-the-top is Mu & Viswanath (ICLR 2018). Pure functions on a layer's occurrence vectors ``X``
(N, d), any float dtype; statistics in float64, the whole layer read in blocks of rows. The engine
(``transforms``, ``layer_pass``) applies the same maps without a transformed copy of the layer, and is
tested against these.
"""

from __future__ import annotations

import numpy as np

from contextuality.measure.reference.measures import row_blocks


def standardize(X: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Z-score each dimension with the layer's own mean and (population) standard deviation.

    Statistics are computed in float64, in blocks of rows (two passes, no full-size temporary). A
    constant dimension (all entries equal, standard deviation 0) becomes exactly 0 rather than NaN or
    inf: it tells the occurrences nothing apart. The result has ``dtype`` (float32 halves the memory of
    a large layer).
    """
    X = np.asarray(X)
    n, d = X.shape
    out = np.empty(X.shape, dtype=dtype)
    if n == 0:
        return out
    mean = X.mean(axis=0, dtype=np.float64)
    squares = np.zeros(d)
    constant = np.ones(d, dtype=bool)
    first = np.asarray(X[0])
    for a, b in row_blocks(n, d):
        block = np.asarray(X[a:b])
        constant &= np.all(block == first, axis=0)
        centred = np.asarray(block, dtype=np.float64) - mean
        squares += np.einsum("ij,ij->j", centred, centred)
    std = np.sqrt(squares / n)
    mean = np.where(constant, first.astype(np.float64), mean)  # exactly the constant: the result is 0
    scale = np.where(constant | (std == 0), 1.0, std)
    for a, b in row_blocks(n, d):
        out[a:b] = (np.asarray(X[a:b], dtype=np.float64) - mean) / scale
    return out


def abtt_components(d: int) -> int:
    """How many top principal components all-but-the-top removes: d/100 rounded (half up), at least 1."""
    return max(1, int(np.floor(d / 100.0 + 0.5)))


def principal_components(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The layer's mean (d,) and its top ``k`` principal axes (k, d), from the centred covariance in float64.

    Each axis is a unit vector, sign-fixed so that its largest-magnitude coordinate is positive
    (principal axes are defined up to sign). Built in blocks of rows: one d x d scatter matrix.
    """
    X = np.asarray(X)
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    scatter = np.zeros((d, d))
    for a, b in row_blocks(n, d):
        block = np.asarray(X[a:b], dtype=np.float64) - mean
        scatter += block.T @ block
    k = min(k, d)
    _, vectors = np.linalg.eigh(scatter)
    axes = vectors[:, ::-1][:, :k].T.copy()
    signs = np.sign(axes[np.arange(k), np.argmax(np.abs(axes), axis=1)])
    return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]


def abtt(X: np.ndarray, n_components: int | None = None, dtype=np.float64) -> np.ndarray:
    """All-but-the-top (Mu & Viswanath, ICLR 2018): remove the mean, then the top principal directions.

    x' = (x - mean) - sum_{j <= D} (u_j . (x - mean)) u_j, with u_j the top D principal axes of the
    layer and D = ``abtt_components(d)`` (d/100 rounded, at least 1) unless given. The mean and a few
    dominating directions carry most of the anisotropy and little meaning; the result is centred and
    orthogonal to them. Computed in float64; the result has ``dtype``.
    """
    X = np.asarray(X)
    n, d = X.shape
    mean, axes = principal_components(X, abtt_components(d) if n_components is None else n_components)
    out = np.empty(X.shape, dtype=dtype)
    for a, b in row_blocks(n, d):
        block = np.asarray(X[a:b], dtype=np.float64) - mean
        out[a:b] = block - (block @ axes.T) @ axes
    return out
