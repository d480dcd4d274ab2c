"""The engine's pass over the indexed occurrences: every word's self-similarity and MEV variants, per variant.

Each word's rows are gathered and converted once; for every variant its self-similarity comes from the
float64 sum of its unit rows (the sum of cosines over ordered pairs i != j is |sum u_i|^2 - n: exact to
float64 rounding whatever the rows' norms, where a float32 Gram matrix mixing attention-sink rows of norm
~23,000 with ordinary rows of norm ~150 is off by up to 1e-3), and the three MEV variants of
``word_pcs`` from the Gram matrix (n <= d occurrences) or the scatter matrix (n > d) of its explicitly
centred rows, exactly as ``word_pcs.pc_stats_by_word`` forms them. A variant's scatter matrix is the
linear map applied to the word's own scatter (d^3, not n d^2). The top eigenpairs of thousands of these
matrices come from ``eigen.top_eigenpairs``. The rows may be numpy arrays or torch tensors on any device
(``backend``): the same code runs on the host and on a GPU.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.engine import backend
from contextuality.measure.engine.eigen import top_eigenpairs
from contextuality.measure.engine.transforms import Transform, subtract_in_two_parts
from contextuality.measure.reference.word_pcs import group_sizes

# Gram matrices of at most this many rows get their spectra from LAPACK (cheaper than Lanczos there).
LAPACK_MAX = 24
# Words with at most this many occurrences are stacked by exact size; larger ones up to d are padded to
# a multiple of PAD_STEP (zero rows and columns leave the top eigenpair unchanged).
STACK_MAX = 48
PAD_STEP = 32
# Upper bound on the elements of one stacked batch (4 MiB in float32).
BATCH_ELEMENTS = 1 << 20
# Rows of a large word (n > d) converted to float64 at once for its unit-row sum.
SELF_SIMILARITY_CHUNK = 1024


class WordStats(NamedTuple):
    """Per-word measures of one variant, aligned with the occurrence index's words (numpy, on the host)."""

    self_similarity: np.ndarray  # exact mean cosine over ordered pairs i != j (``reference.self_similarity_exact``)
    mev: np.ndarray  # the paper's MEV (TruncatedSVD variant); NaN for degenerate words
    mev_literal: np.ndarray
    mev_centered: np.ndarray
    first_vector: np.ndarray | None  # (k, d) uncentred top right singular vector (variant ``none`` only)
    degenerate: np.ndarray  # bool (k,): ``word_pcs.degenerate_words`` of the stored vectors


def _new_word_stats(xp, where, k: int, d: int, with_vectors: bool) -> dict:
    nan = lambda: xp.full(k, float("nan"), dtype=xp.float64, device=where)  # noqa: E731
    return {"self_similarity": nan(), "mev": nan(), "mev_literal": nan(), "mev_centered": nan(),
            "first_vector": xp.full((k, d), float("nan"), dtype=xp.float64, device=where) if with_vectors else None,
            "total_var": nan(), "mean_sq": nan()}  # fmt: skip


def unit_row_sums(Y):
    """The float64 sum of the unit rows of each stack (Y: (..., m, d), any float dtype; zero rows, which have
    no direction, and padding rows left out) and how many rows it holds: (..., d), (...)."""
    xp = backend.namespace(Y)
    Y = xp.astype(Y, xp.float64, copy=False)
    squared = backend.squared_norms(Y)
    nonzero = squared > 0
    inverse = xp.where(nonzero, 1.0 / xp.sqrt(xp.where(nonzero, squared, 1.0)), 0.0)
    return (inverse[..., None, :] @ Y)[..., 0, :], xp.sum(xp.astype(nonzero, xp.float64), axis=-1)


def self_similarity_from_sums(total, count):
    """(|s|^2 - n) / (n (n - 1)) from unit-row sums s and counts n (NaN below two rows), clipped to [-1, 1]:
    identical rows give 1 plus a rounding error, and a mean of cosines lies in [-1, 1]."""
    xp = backend.namespace(total)
    pairs = count * count - count
    value = (xp.sum(total * total, axis=-1) - count) / xp.where(pairs > 0, pairs, 1.0)
    return xp.where(pairs > 0, backend.clip(value, min=-1.0, max=1.0), float("nan"))


def _self_similarity_rows(Y, transform: Transform | None = None):
    """Exact self-similarity of one word's rows (n, d), a chunk of rows at a time in float64 (the
    ``transform``'s rows if given): no float32 rounding, so a word whose occurrences are one vector has
    self-similarity 1 to machine precision. A 0-d array of Y's namespace."""
    xp = backend.namespace(Y)
    total = xp.zeros(Y.shape[1], dtype=xp.float64, device=backend.device(Y))
    count = xp.zeros((), dtype=xp.float64, device=backend.device(Y))
    for start in range(0, Y.shape[0], SELF_SIMILARITY_CHUNK):
        chunk = xp.astype(Y[start : start + SELF_SIMILARITY_CHUNK, :], xp.float64)
        if transform is not None and not transform.identity:
            chunk = transform.rows(chunk, xp.float64)
        s, c = unit_row_sums(chunk)
        total, count = total + s, count + c
    return self_similarity_from_sums(total, count)


def _finish_words(
    out: dict, at, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean, with_vectors: bool
) -> None:
    """MEV variants (``word_pcs._finish``) of a batch of words from their spectra, written into ``out`` at
    the words' places ``at`` (an index array on the rows' device)."""
    xp = backend.namespace(total_var)
    with backend.quiet():
        out["mev"][at] = backend.clip(projected_var / total_var, max=1.0)
        out["mev_centered"][at] = backend.clip(centred_top / (total_var * n), max=1.0)
        out["mev_literal"][at] = backend.clip(backend.clip(theta, min=0.0) / (mean_sq * n), max=1.0)
    out["total_var"][at], out["mean_sq"][at] = total_var, mean_sq
    if with_vectors:
        tiny = float(np.finfo(np.float64).tiny)
        v1 = v1 / backend.clip(xp.linalg.vector_norm(v1, axis=1, keepdims=True), min=tiny)
        v1 = v1 * xp.where(xp.sum(v1 * mean, axis=1) < 0, -1.0, 1.0)[:, None]
        out["first_vector"][at] = v1


def _gram_batch(out: dict, at, C, valid, n, mean, work_dtype, skip_tol, with_vectors) -> None:
    """Words of at most d occurrences, stacked (k, m, d) and zero-padded to m rows: Gram-matrix route.

    ``C`` holds the explicitly centred rows (padding rows 0), ``valid`` (k, m) marks real rows, ``mean``
    (k, d) float64 the words' means. X X^T follows from the centred Gram matrix by the mean's terms.
    Words with total_var <= skip_tol * mean_sq get no centred spectrum (their MEV is NaN anyway).
    Matrices of at most ``LAPACK_MAX`` rows are solved by LAPACK, larger ones by ``top_eigenpairs``.
    """
    xp = backend.namespace(C)
    f64 = xp.float64
    e = xp.astype(valid, work_dtype)
    padded = not bool(xp.all(valid))
    gram_c = C @ xp.matrix_transpose(C)
    a = (C @ xp.astype(mean, work_dtype)[:, :, None])[:, :, 0]
    mean_norm2 = xp.sum(mean * mean, axis=1)
    gram = gram_c + a[:, :, None]
    gram += a[:, None, :]
    gram += xp.astype(mean_norm2, work_dtype)[:, None, None]
    if padded:  # padding rows and columns stay 0
        gram *= e[:, :, None]
        gram *= e[:, None, :]
    total_var = xp.linalg.trace(gram_c, dtype=f64) / n
    mean_sq = total_var + mean_norm2
    centred_top = xp.full(C.shape[0], float("nan"), dtype=f64, device=backend.device(C))
    live = backend.to_host(total_var > skip_tol * mean_sq)
    live_at = backend.index(np.flatnonzero(live), C)
    if C.shape[1] <= LAPACK_MAX:
        values, vectors = xp.linalg.eigh(gram)
        last = C.shape[1] - 1
        theta, u1 = xp.astype(values[:, last], f64), xp.astype(vectors[:, :, last], f64)
        if live.any():
            centred_top[live_at] = xp.astype(xp.linalg.eigvalsh(xp.take(gram_c, live_at, axis=0))[:, last], f64)
    else:
        theta, u1 = top_eigenpairs(gram, (gram @ e[:, :, None])[:, :, 0], valid)
        if live.any():
            centred_top[live_at], _ = top_eigenpairs(
                xp.take(gram_c, live_at, axis=0), None, xp.take(valid, live_at, axis=0)
            )
    # C v1 = C X^T u1 / sigma_1 = (G_c + a 1^T) u1 / sigma_1
    u1w = xp.astype(u1, work_dtype)
    weight = xp.sum(u1 * xp.astype(valid, f64), axis=1)
    projected = xp.astype((gram_c @ u1w[:, :, None])[:, :, 0], f64) + xp.astype(a, f64) * weight[:, None]
    with backend.quiet():
        projected_var = xp.sum(projected * projected, axis=1) / (backend.clip(theta, min=0.0) * n)
    v1 = None
    if with_vectors:
        v1 = xp.astype((u1w[:, None, :] @ C)[:, 0, :], f64) + mean * weight[:, None]
    _finish_words(out, at, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean, with_vectors)


def _scatter_batch(out: dict, at, scatters, means, n, work_dtype, skip_tol, with_vectors) -> None:
    """Words of more than d occurrences from their centred scatter matrices (k, d, d, work dtype) and means."""
    xp = backend.namespace(scatters)
    f64 = xp.float64
    k = scatters.shape[0]
    total_var = xp.linalg.trace(scatters, dtype=f64) / n
    mean_norm2 = xp.sum(means * means, axis=1)
    mean_sq = total_var + mean_norm2
    outer = xp.astype(xp.sqrt(n)[:, None] * means, work_dtype)
    uncentred = scatters + outer[:, :, None] * outer[:, None, :]
    theta, v1 = top_eigenpairs(uncentred, means)
    centred_top = xp.full(k, float("nan"), dtype=f64, device=backend.device(scatters))
    live = backend.to_host(total_var > skip_tol * mean_sq)
    if live.any():
        live_at = backend.index(np.flatnonzero(live), scatters)
        centred_top[live_at], _ = top_eigenpairs(xp.take(scatters, live_at, axis=0))
    v1w = xp.astype(v1, work_dtype)
    projected_var = xp.sum(v1 * xp.astype((scatters @ v1w[:, :, None])[:, :, 0], f64), axis=1) / n
    _finish_words(out, at, total_var, mean_sq, n, theta, centred_top, projected_var, v1, means, with_vectors)


def word_stats(
    X,
    rows: np.ndarray,
    group_starts: np.ndarray,
    transforms: list[Transform],
    *,
    degenerate_tol: float,
    work_dtype=np.float32,
    first_vectors: bool = True,
) -> dict[str, WordStats]:
    """Self-similarity and the MEV variants of every word, for the stored vectors and each variant.

    ``X`` is the layer (any float dtype, numpy or a torch tensor on any device); word i's occurrences are
    ``X[rows[group_starts[i]:group_starts[i + 1]]]`` (``rows`` and ``group_starts``: numpy). Each word's
    rows are gathered and converted to ``work_dtype`` once; every transform is applied to them (its
    scatter matrix, for words of more than d occurrences, from the word's own). Degenerate words are
    those of the stored vectors (``word_pcs.degenerate_words`` with ``degenerate_tol``): their MEV
    variants are NaN in every variant (an affine map gives rows identical up to storage rounding no
    spread beyond rounding). ``first_vectors``: the first singular vectors of the untransformed words
    (of the first transform, which should be ``none``). The results are numpy arrays.
    """
    if not transforms or not transforms[0].identity:
        raise ValueError("word_stats needs the untransformed vectors ('none') as its first transform")
    words = _WordPass(X, rows, group_starts, transforms, degenerate_tol, work_dtype, first_vectors)
    words.stacked()
    words.padded()
    words.scattered()
    return words.results()


class _WordPass:
    """One pass over a layer's indexed occurrences (``word_stats``): the three routes, by occurrence count,
    each filling every variant's per-word outputs."""

    def __init__(self, X, rows, group_starts, transforms, degenerate_tol, work_dtype, first_vectors):
        self.xp = xp = backend.namespace(X)
        self.X, self.transforms, self.tol = X, transforms, degenerate_tol
        self.work_dtype = backend.xp_dtype(xp, work_dtype)
        self.first_vectors = first_vectors
        self.rows = np.asarray(rows, dtype=np.int64)
        self.group_starts = np.asarray(group_starts, dtype=np.int64)
        k, self.d = len(self.group_starts), X.shape[1]
        self.sizes = group_sizes(self.group_starts, len(self.rows))
        where = backend.device(X)
        self.outs = {t.name: _new_word_stats(xp, where, k, self.d, first_vectors and i == 0)
                     for i, t in enumerate(transforms)}  # fmt: skip
        self.limit = min(STACK_MAX, self.d)

    def _gather(self, positions):
        """The rows of occurrence positions (any shape) in the work dtype, as a new array."""
        return self.xp.astype(backend.take_rows(self.X, self.rows[positions]), self.work_dtype, copy=False)

    def gram(self, words: np.ndarray, block, valid, n: np.ndarray) -> None:
        """Words stacked (k, m, d), zero-padded. Self-similarity from the float64 unit rows of each variant's
        own rows; then the stored vectors centred once (in place): a variant's centred rows are its linear
        part applied to them (the shift cancels) and its mean the transform of their float64 mean, so no
        variant re-reads, re-sums or re-centres the rows."""
        xp = self.xp
        f64 = xp.float64
        at = backend.index(words, block)
        n64 = backend.like(n.astype(np.float64), block)
        padded = not bool(xp.all(valid))
        stored = xp.astype(block, f64)  # exact: the work dtype holds the stored values
        for t in self.transforms:
            Y = stored if t.identity else t.rows(stored, f64)  # a variant's rows: a new array
            if padded and not t.identity:  # a padding row (0) is not 0 once shifted
                Y *= xp.astype(valid, f64)[:, :, None]
            self.outs[t.name]["self_similarity"][at] = self_similarity_from_sums(*unit_row_sums(Y))
        del stored
        # the mean of the rows themselves (float64), so that centring leaves no offset
        m = xp.sum(block, axis=1, dtype=f64) / n64[:, None]
        subtract_in_two_parts(block, m)
        if padded:
            block *= xp.astype(valid, block.dtype)[:, :, None]
        for i, t in enumerate(self.transforms):
            if t.identity:
                C, mean = block, m
            else:  # padding rows stay 0 under a linear map
                C, mean = t.linear_rows(block, self.work_dtype), t.rows(m, f64)
            _gram_batch(self.outs[t.name], at, C, valid, n64, mean, self.work_dtype, self.tol if i == 0 else 0.0,
                        self.first_vectors and i == 0)  # fmt: skip

    def stacked(self) -> None:
        """Words of at most min(STACK_MAX, d) occurrences, stacked by size (no padding)."""
        starts, sizes, d = self.group_starts, self.sizes, self.d
        for size in np.unique(sizes[(sizes > 0) & (sizes <= self.limit)]):
            chosen = np.flatnonzero(sizes == size)
            per_batch = max(1, BATCH_ELEMENTS // (int(size) * d))
            for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
                block = self._gather(starts[batch, None] + np.arange(size))
                valid = self.xp.ones((len(batch), int(size)), dtype=self.xp.bool, device=backend.device(block))
                self.gram(batch, block, valid, np.full(len(batch), size))

    def padded(self) -> None:
        """Words of up to d occurrences: padded to a multiple of PAD_STEP rows."""
        starts, sizes, d = self.group_starts, self.sizes, self.d
        medium = np.flatnonzero((sizes > self.limit) & (sizes <= d))
        bins = np.minimum(-(-sizes[medium] // PAD_STEP) * PAD_STEP, d)
        for m in np.unique(bins):
            chosen = medium[bins == m]
            per_batch = max(1, BATCH_ELEMENTS // (int(m) * d))
            for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
                n = sizes[batch]
                valid_host = np.arange(m)[None, :] < n[:, None]
                block = self._gather(starts[batch, None] + np.minimum(np.arange(m), n[:, None] - 1))
                valid = backend.like(valid_host, block)
                block *= self.xp.astype(valid, block.dtype)[:, :, None]
                self.gram(batch, block, valid, n)

    def scattered(self) -> None:
        """Words of more than d occurrences: scatter matrices, one word at a time, solved in batches."""
        xp, starts, sizes, d, transforms = self.xp, self.group_starts, self.sizes, self.d, self.transforms
        f64 = xp.float64
        large = np.flatnonzero(sizes > d)
        per_batch = max(1, BATCH_ELEMENTS // (d * d))
        for batch in np.array_split(large, max(1, -(-len(large) // per_batch))) if len(large) else []:
            collected = {t.name: ([], []) for t in transforms}
            at = backend.index(batch, self.X)
            for j, word in enumerate(batch):
                block = self._gather(np.arange(starts[word], starts[word] + sizes[word]))
                mean = xp.sum(block, axis=0, dtype=f64) / block.shape[0]
                for t in transforms:
                    self.outs[t.name]["self_similarity"][at[j : j + 1]] = _self_similarity_rows(block, t)[None]
                    collected[t.name][1].append(mean if t.identity else t.rows(mean, f64))
                subtract_in_two_parts(block, mean)
                scatter = xp.matrix_transpose(block) @ block
                for t in transforms:
                    collected[t.name][0].append(
                        scatter if t.identity else xp.astype(t.sandwich(scatter), self.work_dtype)
                    )
            n = backend.like(sizes[batch].astype(np.float64), self.X)
            for i, t in enumerate(transforms):
                scatters, means = (xp.stack(v) for v in collected[t.name])
                _scatter_batch(self.outs[t.name], at, scatters, means, n, self.work_dtype,
                               self.tol if i == 0 else 0.0, self.first_vectors and i == 0)  # fmt: skip

    def results(self) -> dict[str, WordStats]:
        """Every variant's ``WordStats`` (numpy), the MEV variants NaN for the stored vectors' degenerate words."""
        host = {t.name: {key: None if value is None else backend.to_host(value) for key, value in self.outs[t.name].items()}
                for t in self.transforms}  # fmt: skip
        first = host[self.transforms[0].name]
        degenerate = first["total_var"] <= self.tol * first["mean_sq"]
        result = {}
        for t in self.transforms:
            o = host[t.name]
            masked = [np.where(degenerate, np.nan, o[c]) for c in ("mev", "mev_literal", "mev_centered")]
            result[t.name] = WordStats(o["self_similarity"], *masked, o["first_vector"], degenerate)
        return result
