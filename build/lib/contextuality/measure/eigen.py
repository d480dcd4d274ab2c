"""The engine's batched top eigenpairs: Lanczos iteration over thousands of small symmetric matrices at once.

``top_eigenpairs`` gives the largest eigenvalue and its eigenvector of each matrix of a stack (k, m, m),
in the stack's dtype (float32 or float64), checked by its residual, with LAPACK for any matrix it does
not settle. ``word_stats`` solves the words' Gram and scatter matrices with it.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from contextuality.measure.word_pcs import lanczos_start

# Lanczos steps per round, rounds before LAPACK takes over, and the accepted residual |A x - theta x| /
# theta of a top eigenpair (float32 arithmetic reaches about 1e-7; the eigenvalue is then good to the
# same relative accuracy, far below the 3 decimals the measures are reported to). On the default
# models' word matrices 12 steps settle nearly every top eigenpair to 1e-7 (a restart the rest).
LANCZOS_STEPS = 12
LANCZOS_ROUNDS = 6
RESIDUAL_TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-11}


def _generic_start(m: int) -> np.ndarray:
    """A fixed start vector, not orthogonal to any particular eigenvector (``word_pcs.lanczos_start``)."""
    return lanczos_start(m)


def _lanczos(A: np.ndarray, start: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Top Ritz pair of each symmetric matrix of A (k, m, m) after ``steps`` Lanczos steps from ``start``.

    Full re-orthogonalisation (classical Gram-Schmidt, twice), so the basis stays orthonormal in float32.
    A basis vector of norm 0 (the Krylov space is exhausted: the Ritz pair is exact) stays 0.
    """
    k, m, _ = A.shape
    s = min(steps, m)
    dtype = A.dtype
    Q = np.zeros((k, s, m), dtype=dtype)
    alpha = np.zeros((k, s))
    beta = np.zeros((k, s))
    norms = np.linalg.norm(start, axis=1, keepdims=True)
    q = (start / np.where(norms > 0, norms, 1.0)).astype(dtype)
    tiny = np.finfo(dtype).eps
    for j in range(s):
        Q[:, j] = q
        w = np.matmul(A, q[:, :, None])[:, :, 0]
        basis = Q[:, : j + 1]
        for sweep in range(2):
            c = np.einsum("kjm,km->kj", basis, w)
            w -= np.einsum("kjm,kj->km", basis, c)
            alpha[:, j] += c[:, j]
        b = np.linalg.norm(w.astype(np.float64), axis=1)
        beta[:, j] = b
        scale = np.abs(alpha[:, : j + 1]).max(axis=1) + beta[:, j]
        live = b > 64 * tiny * np.maximum(scale, np.finfo(np.float64).tiny)
        q = np.where(live[:, None], w / np.where(live, b, 1.0)[:, None].astype(dtype), 0).astype(dtype)
    T = np.zeros((k, s, s))
    idx = np.arange(s)
    T[:, idx, idx] = alpha
    T[:, idx[:-1], idx[1:]] = beta[:, : s - 1]
    T[:, idx[1:], idx[:-1]] = beta[:, : s - 1]
    values, vectors = np.linalg.eigh(T)
    x = np.matmul(vectors[:, None, :, -1].astype(dtype), Q)[:, 0, :].astype(np.float64)
    return values[:, -1], x


def top_eigenpairs(A: np.ndarray, start: np.ndarray | None = None, mask: np.ndarray | None = None, *,
                   tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Largest eigenvalue and a unit eigenvector of each symmetric positive semi-definite matrix of A (k, m, m).

    Batched Lanczos (float64 tridiagonal, A's own dtype for the products), restarted from the current
    Ritz vector until |A x - theta x| <= tol * theta (``RESIDUAL_TOL`` of A's dtype by default); matrices
    still unsettled after ``LANCZOS_ROUNDS`` rounds get LAPACK's answer in float64, zero matrices 0.
    ``start`` (k, m): start vectors (default: a fixed generic vector); a small generic part is added so
    that no start is orthogonal to the top eigenvector. ``mask`` (k, m) bool: the coordinates in use
    (zero-padded matrices); starts are kept inside them. Returns values (k,) and vectors (k, m), float64.
    """
    A = np.asarray(A)
    k, m, _ = A.shape
    values, vectors = np.zeros(k), np.zeros((k, m))
    if k == 0 or m == 0:
        return values, vectors
    tol = RESIDUAL_TOL.get(A.dtype, RESIDUAL_TOL[np.dtype(np.float64)]) if tol is None else tol
    mask = np.ones((k, m), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    generic = np.where(mask, _generic_start(m), 0.0)
    generic /= np.maximum(np.linalg.norm(generic, axis=1, keepdims=True), np.finfo(np.float64).tiny)
    start = generic.copy() if start is None else np.where(mask, np.asarray(start, dtype=np.float64), 0.0)
    norms = np.linalg.norm(start, axis=1, keepdims=True)
    start = np.where(norms > 0, start / np.where(norms > 0, norms, 1.0), generic) + 1e-3 * generic
    todo = np.arange(k)
    for _ in range(LANCZOS_ROUNDS):
        if not len(todo):
            break
        batch = A[todo] if len(todo) < k else A
        theta, x = _lanczos(batch, start[todo], LANCZOS_STEPS)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        xw = x.astype(A.dtype)
        product = np.matmul(batch, xw[:, :, None])[:, :, 0]
        residual = np.linalg.norm((product - theta[:, None].astype(A.dtype) * xw).astype(np.float64), axis=1)
        done = (residual <= tol * theta) & (theta > 0)
        values[todo[done]], vectors[todo[done]] = theta[done], x[done]
        start[todo[~done]] = x[~done] + 1e-3 * generic[todo[~done]]
        todo = todo[~done]
    for i in todo:  # unsettled, or a zero matrix
        matrix = np.asarray(A[i], dtype=np.float64)
        if not matrix.any():
            values[i], vectors[i] = 0.0, generic[i]
            continue
        w, v = scipy.linalg.eigh(matrix, subset_by_index=[m - 1, m - 1], check_finite=False)
        values[i], vectors[i] = w[0], v[:, 0]
    return values, vectors
