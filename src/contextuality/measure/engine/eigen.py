"""The engine's batched top eigenpairs: Lanczos iteration over thousands of small symmetric matrices at once.

``top_eigenpairs`` gives the largest eigenvalue and its eigenvector of each matrix of a stack (k, m, m),
in the stack's dtype (float32 or float64), checked by its residual, with LAPACK for any matrix it does
not settle. ``word_stats`` solves the words' Gram and scatter matrices with it. Matrix products only, so
the same code runs on either backend (``backend``): numpy on the host, torch on a device.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from contextuality.measure.engine import backend
from contextuality.measure.reference.word_pcs import lanczos_start

# Lanczos steps per round, rounds before LAPACK takes over, and the accepted residual |A x - theta x| /
# theta of a top eigenpair (float32 arithmetic reaches about 1e-7; the eigenvalue is then good to the
# same relative accuracy, far below the 3 decimals the measures are reported to). On the default
# models' word matrices 12 steps settle nearly every top eigenpair to 1e-7 (a restart the rest).
LANCZOS_STEPS = 12
LANCZOS_ROUNDS = 6
RESIDUAL_TOL = {"float32": 2e-5, "float64": 1e-11}


def _lanczos(A, start, steps: int):
    """Top Ritz pair of each symmetric matrix of A (k, m, m) after ``steps`` Lanczos steps from ``start``
    (k, m, float64). Returns (values (k,), vectors (k, m)), float64, in A's namespace.

    Full re-orthogonalisation (classical Gram-Schmidt, twice), so the basis stays orthonormal in float32.
    A basis vector of norm 0 (the Krylov space is exhausted: the Ritz pair is exact) stays 0.
    """
    xp = backend.namespace(A)
    k, m, _ = A.shape
    s = min(steps, m)
    dtype, f64, where = A.dtype, xp.float64, backend.device(A)
    Q = xp.zeros((k, s, m), dtype=dtype, device=where)
    alpha = xp.zeros((k, s), dtype=f64, device=where)
    beta = xp.zeros((k, s), dtype=f64, device=where)
    norms = xp.linalg.vector_norm(start, axis=1, keepdims=True)
    q = xp.astype(start / xp.where(norms > 0, norms, 1.0), dtype)
    tiny = float(np.finfo(backend.dtype_name(dtype)).eps)
    for j in range(s):
        Q[:, j, :] = q
        w = (A @ q[:, :, None])[:, :, 0]
        basis = Q[:, : j + 1, :]
        for _sweep in range(2):
            c = (basis @ w[:, :, None])[:, :, 0]
            w = w - (c[:, None, :] @ basis)[:, 0, :]
            alpha[:, j] += xp.astype(c[:, j], f64)
        b = xp.linalg.vector_norm(xp.astype(w, f64), axis=1)
        beta[:, j] = b
        scale = xp.max(xp.abs(alpha[:, : j + 1]), axis=1) + b
        live = b > 64 * tiny * backend.clip(scale, min=float(np.finfo(np.float64).tiny))
        q = xp.where(live[:, None], w / xp.astype(xp.where(live, b, 1.0), dtype)[:, None], xp.zeros_like(w))
    T = xp.zeros((k, s, s), dtype=f64, device=where)
    idx = xp.arange(s, device=where)
    T[:, idx, idx] = alpha
    if s > 1:
        T[:, idx[:-1], idx[1:]] = beta[:, : s - 1]
        T[:, idx[1:], idx[:-1]] = beta[:, : s - 1]
    values, vectors = xp.linalg.eigh(T)
    x = xp.astype((xp.astype(vectors[:, None, :, s - 1], dtype) @ Q)[:, 0, :], f64)
    return values[:, s - 1], x


def top_eigenpairs(A, start=None, mask=None, *, tol: float | None = None):
    """Largest eigenvalue and a unit eigenvector of each symmetric positive semi-definite matrix of A (k, m, m).

    Batched Lanczos (float64 tridiagonal, A's own dtype for the products), restarted from the current
    Ritz vector until |A x - theta x| <= tol * theta (``RESIDUAL_TOL`` of A's dtype by default); matrices
    still unsettled after ``LANCZOS_ROUNDS`` rounds get LAPACK's answer in float64 (on the host), zero
    matrices 0. ``start`` (k, m): start vectors (default: a fixed generic vector); a small generic part
    is added so that no start is orthogonal to the top eigenvector. ``mask`` (k, m) bool: the coordinates
    in use (zero-padded matrices); starts are kept inside them. Returns values (k,) and vectors (k, m),
    float64, in A's namespace.
    """
    xp = backend.namespace(A)
    k, m, _ = A.shape
    f64, where = xp.float64, backend.device(A)
    values, vectors = xp.zeros(k, dtype=f64, device=where), xp.zeros((k, m), dtype=f64, device=where)
    if k == 0 or m == 0:
        return values, vectors
    tol = RESIDUAL_TOL.get(backend.dtype_name(A.dtype), RESIDUAL_TOL["float64"]) if tol is None else tol
    mask = xp.ones((k, m), dtype=xp.bool, device=where) if mask is None else mask
    generic = xp.where(mask, backend.like(lanczos_start(m), A, f64), 0.0)
    generic = generic / backend.clip(
        xp.linalg.vector_norm(generic, axis=1, keepdims=True), min=float(np.finfo(np.float64).tiny)
    )
    start = generic if start is None else xp.where(mask, xp.astype(start, f64), 0.0)
    norms = xp.linalg.vector_norm(start, axis=1, keepdims=True)
    start = xp.where(norms > 0, start / xp.where(norms > 0, norms, 1.0), generic) + 1e-3 * generic
    todo = np.arange(k)
    for _ in range(LANCZOS_ROUNDS):
        if not len(todo):
            break
        rows = None if len(todo) == k else backend.index(todo, A)
        batch = A if rows is None else xp.take(A, rows, axis=0)
        theta, x = _lanczos(batch, start if rows is None else xp.take(start, rows, axis=0), LANCZOS_STEPS)
        x = x / backend.clip(xp.linalg.vector_norm(x, axis=1, keepdims=True), min=float(np.finfo(np.float64).tiny))
        xw = xp.astype(x, A.dtype)
        product = (batch @ xw[:, :, None])[:, :, 0]
        residual = xp.linalg.vector_norm(xp.astype(product - xp.astype(theta, A.dtype)[:, None] * xw, f64), axis=1)
        done = backend.to_host((residual <= tol * theta) & (theta > 0))
        settled, unsettled = backend.index(todo[done], A), backend.index(todo[~done], A)
        done_here, open_here = backend.index(np.flatnonzero(done), A), backend.index(np.flatnonzero(~done), A)
        values[settled] = xp.take(theta, done_here, axis=0)
        vectors[settled] = xp.take(x, done_here, axis=0)
        start[unsettled] = xp.take(x, open_here, axis=0) + 1e-3 * xp.take(generic, unsettled, axis=0)
        todo = todo[~done]
    for i in todo:  # unsettled, or a zero matrix
        matrix = np.asarray(backend.to_host(A[int(i)]), dtype=np.float64)
        if not matrix.any():
            values[int(i)], vectors[int(i)] = 0.0, generic[int(i)]
            continue
        w, v = scipy.linalg.eigh(matrix, subset_by_index=[m - 1, m - 1], check_finite=False)
        values[int(i)], vectors[int(i)] = float(w[0]), backend.like(v[:, 0], A, f64)
    return values, vectors
