"""The rows the similarity engine measures: a layer under a variant, centred exactly, in chunks (spec
similarity-atlas 4.1, 4.4).

A variant maps a layer's rows (n x d, the stored dtype, numpy or a tensor on any device) before any measure:
``raw`` the rows; ``unit_rows`` each row at unit L2 norm (a zero row stays zero); ``standardize`` each
dimension divided by its float64 standard deviation (a constant one set to 0); ``no_massive`` only the
rows where the caller's ``keep`` is True (``massive_row_mask`` finds the rows carrying a massive
activation). Then the rows are always centred on the layer's exact float64 mean, found in a pass of its
own before any product (``layer_centring``): the one-pass shortcut (uncentred float32 X^T Y, then
- n mu nu^T) loses mean-dominated dimensions to float32 rounding. ``centred_chunks`` gives the centred
rows a chunk at a time: mapped and centred in float64, then cast to the compute dtype for the products,
with each row's float64 squared norm beside them (the debiased estimator's row terms).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.engine.backend import COMPUTE_DTYPES as LAYER_COMPUTE_DTYPES
from contextuality.measure.engine.rogue import massive_activations

VARIANTS = ("raw", "unit_rows", "standardize", "no_massive")
COMPUTE_DTYPES = tuple(LAYER_COMPUTE_DTYPES)  # the engine's compute dtypes: metrics.compute_dtype's, by name
# The debiased estimator divides by n (n - 3).
MIN_ROWS = 4


def check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: one of {', '.join(allowed)}; got {value!r}")


def check_layers(name: str, layers, n_rows: int | None = None) -> int:
    """The row count every layer of ``layers`` shares (``n_rows`` when given); ValueError otherwise."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or len(layers) == 0:
        raise ValueError(f"{name}: a non-empty list of layers (n x d arrays); got {type(layers).__name__}")
    for at, layer in enumerate(layers):
        shape = tuple(getattr(layer, "shape", ()))
        if len(shape) != 2:
            raise ValueError(
                f"{name}: every layer must be a 2-D array (rows x dimensions); layer {at} has shape {shape}"
            )
        if n_rows is None:
            n_rows = shape[0]
        if shape[0] != n_rows:
            raise ValueError(f"{name}: every layer must have the same {n_rows} rows; layer {at} has {shape[0]}")
    return n_rows


def kept_rows(keep, n_rows: int, variant: str) -> np.ndarray | None:
    """The positions of the rows to measure (None: all ``n_rows``), from the bool mask ``keep``."""
    check_choice("variant", variant, VARIANTS)
    if keep is None:
        if variant == "no_massive":
            raise ValueError("keep: variant 'no_massive' needs a bool mask of the rows to keep; got None")
        return None
    keep = backend.to_host(keep)
    if keep.dtype != bool or keep.shape != (n_rows,):
        raise ValueError(f"keep: a bool mask of the {n_rows} rows; got {keep.dtype} of shape {keep.shape}")
    return np.flatnonzero(keep)


def check_row_count(n_rows: int) -> None:
    if n_rows < MIN_ROWS:
        raise ValueError(
            f"rows: at least {MIN_ROWS} are needed (the debiased estimator divides by n - 3); got {n_rows}"
        )


def massive_row_mask(layers) -> np.ndarray:
    """True for the rows that carry a massive activation (``rogue.massive_activations``: |x| > 100 and
    |x| >= 1000 x the layer's median |x|, Sun et al. 2024) in any of ``layers`` (the same rows in each)."""
    n_rows = check_layers("layers", layers)
    mask = np.zeros(n_rows, dtype=bool)
    for layer in layers:
        mask |= massive_activations(layer).rows
    return mask


@dataclass(eq=False)
class Centring:
    """A layer's rows as a variant measures them: which rows, and the float64 point and scales of the map
    x -> (x [/ |x|] - mean) * scale."""

    variant: str
    rows: np.ndarray | None  # positions of the measured rows (None: all)
    n_rows: int
    mean: np.ndarray  # (d,) float64, of the mapped rows
    scale: np.ndarray | None  # (d,) float64, 1 / sd (0 for a constant dimension); ``standardize`` only
    _on_device: dict = field(default_factory=dict, repr=False)

    def param(self, name: str, like):
        """``mean`` or ``scale`` as a float64 array of ``like``'s namespace and device (copied once)."""
        value = getattr(self, name)
        if isinstance(like, np.ndarray):
            return value
        key = (name, str(backend.device(like)))
        if key not in self._on_device:
            self._on_device[key] = backend.like(value, like, "float64")
        return self._on_device[key]

    def same_map(self, other: Centring) -> bool:
        """Whether both centrings map the same rows by the same numbers (bit for bit)."""
        same = lambda a, b: (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))  # noqa: E731
        return self.variant == other.variant and self.n_rows == other.n_rows and same(self.rows, other.rows) \
            and same(self.mean, other.mean) and same(self.scale, other.scale)  # fmt: skip


def chunk_bounds(n_rows: int, chunk_rows: int):
    return [(start, min(n_rows, start + chunk_rows)) for start in range(0, n_rows, max(1, chunk_rows))]


def _gather(x, rows: np.ndarray | None, select):
    """The measured rows ``select`` (a slice, or positions among the measured rows) of ``x``."""
    if isinstance(select, slice):
        return x[select] if rows is None else backend.take_rows(x, rows[select])
    return backend.take_rows(x, select if rows is None else rows[select])


def _mapped(x, variant: str, rows, select):
    """The measured rows ``select`` in float64 (a new array), at unit norm for ``unit_rows``."""
    xp = backend.namespace(x)
    block = xp.astype(_gather(x, rows, select), xp.float64, copy=True)
    if variant == "unit_rows":
        norms = xp.sqrt(backend.squared_norms(block))
        block /= xp.where(norms > 0, norms, 1.0)[:, None]
    return block


def layer_centring(x, variant: str, rows: np.ndarray | None, chunk_rows: int) -> Centring:
    """The float64 mean (and, for ``standardize``, the scales) of ``x``'s measured rows, in passes of chunks.
    Raises ValueError on a layer whose measured rows are not all finite."""
    n_rows = x.shape[0] if rows is None else len(rows)
    bounds = chunk_bounds(n_rows, chunk_rows)
    xp = backend.namespace(x)
    total = np.zeros(x.shape[1])
    for start, stop in bounds:
        total += backend.to_host(xp.sum(_mapped(x, variant, rows, slice(start, stop)), axis=0))
    mean = total / n_rows
    if not np.isfinite(mean).all():
        raise ValueError("layers: every measured value must be finite; a layer holds inf or NaN")
    scale = None
    if variant == "standardize":  # the variance around the exact mean: a second pass
        squares = np.zeros(x.shape[1])
        for start, stop in bounds:
            block = _mapped(x, variant, rows, slice(start, stop)) - backend.like(mean, x, "float64")
            squares += backend.to_host(xp.sum(block * block, axis=0))
        sd = np.sqrt(squares / n_rows)
        scale = np.divide(1.0, sd, out=np.zeros_like(sd), where=sd > 0)
    return Centring(variant, rows, n_rows, mean, scale)


def centred_rows(x, centring: Centring, select, dtype: str):
    """The measured rows ``select`` (a slice, or positions among the measured rows) centred, in ``dtype``,
    and their float64 squared norms."""
    block = _mapped(x, centring.variant, centring.rows, select)
    block -= centring.param("mean", block)
    if centring.scale is not None:
        block *= centring.param("scale", block)
    xp = backend.namespace(block)
    return xp.astype(block, backend.xp_dtype(xp, dtype), copy=False), backend.squared_norms(block)


def centred_chunks(x, centring: Centring, chunk_rows: int, dtype: str):
    """(start, stop, centred rows in ``dtype``, their float64 squared norms) for each chunk of measured rows."""
    for start, stop in chunk_bounds(centring.n_rows, chunk_rows):
        yield start, stop, *centred_rows(x, centring, slice(start, stop), dtype)


def same_values(x, y) -> bool:
    """Whether two layers are the same input: one object, or equal shapes, dtypes and values in one namespace."""
    if x is y:
        return True
    if tuple(x.shape) != tuple(y.shape) or backend.dtype_name(x.dtype) != backend.dtype_name(y.dtype):
        return False
    if isinstance(x, np.ndarray) != isinstance(y, np.ndarray):
        return False
    xp = backend.namespace(x, y)
    return bool(xp.all(x == y))
