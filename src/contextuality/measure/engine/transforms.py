"""The engine's post-processing variants as affine maps (``Transform``), and its exact float32 subtraction.

A variant is x -> Q diag(scale) (x - shift) (``none``: the identity). Its measures are the paper's
measures of the transformed vectors; ``layer_pass.make_transform`` builds ``standardize`` and ``abtt``
(the maps of ``postprocess.standardize`` and ``postprocess.abtt``) from a layer's pass. The engine
applies a map to the rows it has gathered, or its linear part to centred rows and scatter matrices,
never to a copy of the whole layer. ``subtract_in_two_parts`` centres float32 rows on a float64 point
without losing their spread. Rows may live in either backend (``backend``): a map's parameters are kept
in float64 on the host and copied once to the rows' device and dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contextuality.measure.engine import backend

VARIANTS = ("none", "standardize", "abtt")


@dataclass(frozen=True, eq=False)
class Transform:
    """x -> Q diag(scale) (x - shift), with Q = I - axes^T axes; ``none`` is the identity (all None)."""

    name: str
    shift: np.ndarray | None = None  # (d,) float64
    scale: np.ndarray | None = None  # (d,) float64; 0 for a constant dimension
    axes: np.ndarray | None = None  # (D, d) float64, orthonormal rows
    _on_device: dict = field(default_factory=dict, repr=False)  # the parameters as a device's arrays, by dtype

    @property
    def identity(self) -> bool:
        return self.shift is None and self.scale is None and self.axes is None

    def _param(self, name: str, like, dtype):
        """Parameter ``name`` in ``like``'s namespace, device and ``dtype`` (copied to a device once)."""
        value = getattr(self, name)
        if isinstance(like, np.ndarray):
            return value.astype(backend.dtype_name(dtype), copy=False)
        key = (name, str(backend.device(like)), backend.dtype_name(dtype))
        if key not in self._on_device:
            self._on_device[key] = backend.like(value, like, dtype)
        return self._on_device[key]

    def rows(self, X, dtype):
        """The transformed rows (any leading shape, last axis d) in ``dtype``; the identity may return X."""
        xp = backend.namespace(X)
        work = backend.xp_dtype(xp, dtype)
        if self.identity:
            return xp.astype(X, work, copy=False)
        return self._linear_in_place(xp.astype(X, work, copy=False) - self._param("shift", X, work), work)

    def vector(self, v: np.ndarray) -> np.ndarray:
        """The transform of points v (float64, on the host)."""
        return self.rows(np.asarray(v, dtype=np.float64), np.float64)

    def linear_rows(self, C, dtype):
        """The linear part applied to rows C (any leading shape, last axis d) in ``dtype``, as a new array:
        centred rows of the transformed vectors from centred rows of the stored ones."""
        xp = backend.namespace(C)
        work = backend.xp_dtype(xp, dtype)
        return self._linear_in_place(xp.astype(C, work, copy=True), work)

    def _linear_in_place(self, Y, dtype):
        if self.scale is not None:
            Y *= self._param("scale", Y, dtype)
        if self.axes is not None:
            axes = self._param("axes", Y, dtype)
            Y -= (Y @ axes.T) @ axes
        return Y

    def sandwich(self, S):
        """A S A^T for symmetric S (..., d, d) in float64 (either backend), A the linear part (scatter
        matrices of transformed rows)."""
        xp = backend.namespace(S)
        S = xp.astype(S, xp.float64, copy=False)
        if self.scale is not None:
            scale = self._param("scale", S, xp.float64)
            S = S * scale[:, None] * scale[None, :]
        if self.axes is not None:
            U = self._param("axes", S, xp.float64)
            SU = S @ U.T  # (..., d, D)
            S = S - SU @ U - xp.matrix_transpose(SU @ U) + U.T @ (U @ SU) @ U
        return S


def subtract_in_two_parts(Y, v) -> None:
    """Y -= v in place, v in float64 and Y in float32 (or float64), v broadcast over rows: v is split into
    its float32 value and the rounding remainder, subtracted one after the other, so each result is
    accurate to its own rounding, not to that of |v| (near-duplicate rows keep their spread). ``v`` is in
    Y's namespace (a numpy ``v`` is copied to Y's device)."""
    xp = backend.namespace(Y)
    if isinstance(v, np.ndarray) and not isinstance(Y, np.ndarray):
        v = backend.like(v, Y, xp.float64)
    high = xp.astype(v, Y.dtype)
    Y -= xp.expand_dims(high, axis=-2)
    if Y.dtype != xp.float64:
        Y -= xp.expand_dims(xp.astype(v - xp.astype(high, xp.float64), Y.dtype), axis=-2)
