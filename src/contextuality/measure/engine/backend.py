"""The engine's two backends: numpy on the host, torch on a device, one array code.

The engine's array code (``layer_pass``, ``word_stats``, ``eigen``, ``transforms``, ``sentences``, the
streamed massive activations of ``rogue``) is written once against the array API standard, through
``array_api_compat`` (as scikit-learn and SciPy do): ``xp = namespace(X)`` is numpy's namespace for a
numpy array and torch's for a tensor, on whatever device the tensor lives. This module gives the few
things the standard lacks, each for both backends: ``einsum`` (both libraries have it, with the same
subscripts), the k largest keys of each row (``top_k``), the order-preserving magnitude keys of float16
values (a bit view), host copies, dtypes by name, and index arrays moved to the data's device. Everything
the engine computes on a host copy (seeded draws, eigen-solves of d x d matrices, the tables) stays
plain numpy.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np

try:
    import array_api_compat
except ImportError:  # a GPU image without the package: scikit-learn's vendored copy is the same library
    from sklearn.externals import array_api_compat

# The engine's compute dtypes (``metrics.compute_dtype``'s and ``similarity.compute_dtype``'s values), by name.
COMPUTE_DTYPES = {"float32": np.float32, "float64": np.float64}


def namespace(*arrays):
    """The array namespace of ``arrays`` (numpy's or torch's, as the array API standard defines it)."""
    return array_api_compat.array_namespace(*arrays)


def is_numpy(xp) -> bool:
    return array_api_compat.is_numpy_namespace(xp)


def device(x):
    return array_api_compat.device(x)


def dtype(xp, name) -> object:
    """The dtype of ``xp`` called ``name`` (a numpy dtype, a dtype name or an ``xp`` dtype)."""
    if not isinstance(name, str):
        name = dtype_name(name)
    return getattr(xp, name)


def dtype_name(dtype) -> str:
    """ "float32" for numpy's and torch's float32 alike."""
    text = str(dtype)
    return text.removeprefix("torch.") if text.startswith("torch.") else np.dtype(dtype).name


def itemsize(dtype) -> int:
    return np.dtype(dtype_name(dtype)).itemsize


def to_host(x) -> np.ndarray:
    """A numpy array with ``x``'s values (no copy for a numpy array)."""
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x.detach().cpu()) if hasattr(x, "detach") else np.asarray(x)


def like(values, x, dtype=None):
    """``values`` (numpy, or a scalar) as an array of ``x``'s namespace, on ``x``'s device, in ``dtype``."""
    xp = namespace(x)
    if is_numpy(xp):
        return np.asarray(values, dtype=None if dtype is None else dtype_name(dtype))
    return xp.asarray(np.asarray(values), dtype=None if dtype is None else xp_dtype(xp, dtype), device=device(x))


def xp_dtype(xp, dtype):
    return dtype if not isinstance(dtype, (str, np.dtype, type)) else getattr(xp, dtype_name(dtype))


def index(positions, x):
    """Integer positions (numpy) as an index array on ``x``'s device (int64)."""
    return like(np.asarray(positions, dtype=np.int64), x)


def take_rows(x, positions):
    """``x[positions]`` for integer positions of any shape (numpy), gathered on ``x``'s device."""
    positions = np.asarray(positions, dtype=np.int64)
    xp = namespace(x)
    flat = xp.take(x, index(positions.reshape(-1), x), axis=0)
    return xp.reshape(flat, (*positions.shape, *x.shape[1:]))


def _torch():
    """The torch module, already imported by whoever made a tensor (the host's jobs never import it)."""
    return sys.modules["torch"]


def einsum(subscripts: str, *operands):
    """``numpy.einsum`` or ``torch.einsum``, by the operands' namespace (not in the array API standard)."""
    if is_numpy(namespace(*operands)):
        return np.einsum(subscripts, *operands)
    return _torch().einsum(subscripts, *operands)


def clip(x, min: float | None = None, max: float | None = None):
    """``x`` clipped to [min, max] (NaN stays NaN), by each backend's own operation: numpy's maximum and
    minimum, torch's clamp. array_api_compat's ``clip`` is a generic Python wrapper (13 µs a call on numpy,
    against 1.7 µs for ``np.maximum``) and torch's ``maximum`` of a Python number wraps it in a tensor first
    (8 µs, against 2.6 µs for ``clamp``); the Lanczos steps alone clip about 12,000 times a layer."""
    if not isinstance(x, (np.ndarray, np.generic)):
        return x.clamp(min=min, max=max)
    if min is not None:
        x = np.maximum(x, min)
    return x if max is None else np.minimum(x, max)


def squared_norms(Y):
    """The squared norm of each row (the last axis) of ``Y``: numpy's ``vecdot`` (no temporary of Y's
    size: a quarter of ``sum(Y * Y)``'s time), torch's ``sum(Y * Y)`` (its CPU ``vecdot`` is 2.4 times
    slower)."""
    if isinstance(Y, np.ndarray):
        return np.vecdot(Y, Y)
    return (Y * Y).sum(dim=-1)


def top_k(keys, k: int):
    """The column positions of the ``k`` largest entries of each row of ``keys`` (2-D), largest first: numpy's
    argpartition and a sort of those k, or torch's ``topk`` (not in the array API standard). Equal keys may
    come in either order: distinct keys give one answer on both backends."""
    if not isinstance(keys, np.ndarray):
        return _torch().topk(keys, k, dim=1, largest=True, sorted=True).indices
    largest = np.argpartition(keys, keys.shape[1] - k, axis=1)[:, keys.shape[1] - k :]
    order = np.argsort(np.take_along_axis(keys, largest, axis=1), axis=1)[:, ::-1]
    return np.take_along_axis(largest, order, axis=1)


def magnitude_keys(x):
    """|x| of a float16 array as order-preserving integers (its bit pattern, sign cleared), without
    converting it: numpy's float16 arithmetic is slow, and the keys compare exactly as |x| does (inf is
    0x7C00, NaNs above it). Other dtypes: |x| itself."""
    xp = namespace(x)
    if dtype_name(x.dtype) != "float16":
        return xp.abs(x)
    if is_numpy(xp):
        return np.ascontiguousarray(x).view(np.uint16) & np.uint16(0x7FFF)
    return x.contiguous().view(_torch().int16) & 0x7FFF


def float16_key(value: float) -> int:
    """The ``magnitude_keys`` key of a non-negative float16 value."""
    return int(np.float16(value).view(np.uint16))


@contextmanager
def quiet():
    """0/0 and x/0 give NaN and inf silently (numpy warns; torch never does)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        yield
