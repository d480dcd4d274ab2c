"""The engine's post-processing variants as affine maps (``Transform``), and its exact float32 subtraction.

A variant is x -> Q diag(scale) (x - shift) (``none``: the identity). Its measures are the paper's
measures of the transformed vectors; ``layer_pass.make_transform`` builds ``standardize`` and ``abtt``
(the maps of ``postprocess.standardize`` and ``postprocess.abtt``) from a layer's pass. The engine
applies a map to the rows it has gathered, or its linear part to centred rows and scatter matrices,
never to a copy of the whole layer. ``subtract_in_two_parts`` centres float32 rows on a float64 point
without losing their spread.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

VARIANTS = ("none", "standardize", "abtt")


class Transform(NamedTuple):
    """x -> Q diag(scale) (x - shift), with Q = I - axes^T axes; ``none`` is the identity (all None)."""

    name: str
    shift: np.ndarray | None = None  # (d,) float64
    scale: np.ndarray | None = None  # (d,) float64; 0 for a constant dimension
    axes: np.ndarray | None = None  # (D, d) float64, orthonormal rows

    @property
    def identity(self) -> bool:
        return self.shift is None and self.scale is None and self.axes is None

    def rows(self, X: np.ndarray, dtype) -> np.ndarray:
        """The transformed rows (any leading shape, last axis d) in ``dtype``."""
        if self.identity:
            return np.asarray(X, dtype=dtype)
        return self._linear_in_place(np.asarray(X, dtype=dtype) - self.shift.astype(dtype), dtype)

    def vector(self, v: np.ndarray) -> np.ndarray:
        """The transform of points v (float64)."""
        return self.rows(np.asarray(v, dtype=np.float64), np.float64)

    def linear_rows(self, C: np.ndarray, dtype) -> np.ndarray:
        """The linear part applied to rows C (any leading shape, last axis d) in ``dtype``, as a new array:
        centred rows of the transformed vectors from centred rows of the stored ones."""
        return self._linear_in_place(np.array(C, dtype=dtype), dtype)

    def _linear_in_place(self, Y: np.ndarray, dtype) -> np.ndarray:
        if self.scale is not None:
            Y *= self.scale.astype(dtype)
        if self.axes is not None:
            axes = self.axes.astype(dtype)
            Y -= (Y @ axes.T) @ axes
        return Y

    def sandwich(self, S: np.ndarray) -> np.ndarray:
        """A S A^T for symmetric S (..., d, d), A the linear part (scatter matrices of transformed rows)."""
        S = np.asarray(S, dtype=np.float64)
        if self.scale is not None:
            S = S * self.scale[:, None] * self.scale[None, :]
        if self.axes is not None:
            U = self.axes
            SU = S @ U.T  # (..., d, D)
            S = S - SU @ U - np.swapaxes(SU @ U, -1, -2) + U.T @ (U @ SU) @ U
        return S


def subtract_in_two_parts(Y: np.ndarray, v: np.ndarray) -> None:
    """Y -= v in place, v in float64 and Y in float32 (or float64), v broadcast over rows: v is split into
    its float32 value and the rounding remainder, subtracted one after the other, so each result is
    accurate to its own rounding, not to that of |v| (near-duplicate rows keep their spread)."""
    high = v.astype(Y.dtype)
    Y -= np.expand_dims(high, -2)
    if Y.dtype != np.float64:
        Y -= np.expand_dims((v - high).astype(Y.dtype), -2)
