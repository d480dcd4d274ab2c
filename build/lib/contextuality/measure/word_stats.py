"""The engine's pass over the indexed occurrences: every word's self-similarity and MEV variants, per variant.

Each word's rows are gathered and converted once; for every variant its self-similarity and the three
MEV variants of ``word_pcs`` come from the Gram matrix (n <= d occurrences) or the scatter matrix
(n > d) of its explicitly centred rows, exactly as ``word_pcs.pc_stats_by_word`` forms them. A
variant's scatter matrix is the linear map applied to the word's own scatter (d^3, not n d^2). The top
eigenpairs of thousands of these matrices come from ``eigen.top_eigenpairs``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from contextuality.measure.eigen import top_eigenpairs
from contextuality.measure.transforms import Transform, subtract_in_two_parts
from contextuality.measure.word_pcs import group_sizes

# Gram matrices of at most this many rows get their spectra from LAPACK (cheaper than Lanczos there).
LAPACK_MAX = 24
# Words with at most this many occurrences are stacked by exact size; larger ones up to d are padded to
# a multiple of PAD_STEP (zero rows and columns leave the top eigenpair unchanged).
STACK_MAX = 48
PAD_STEP = 32
# Upper bound on the elements of one stacked batch (4 MiB in float32).
BATCH_ELEMENTS = 1 << 20


class WordStats(NamedTuple):
    """Per-word measures of one variant, aligned with the occurrence index's words."""

    self_similarity: np.ndarray  # exact mean cosine over ordered pairs i != j (``reference.self_similarity_exact``)
    mev: np.ndarray  # the paper's MEV (TruncatedSVD variant); NaN for degenerate words
    mev_literal: np.ndarray
    mev_centered: np.ndarray
    first_vector: np.ndarray | None  # (k, d) uncentred top right singular vector (variant ``none`` only)
    degenerate: np.ndarray  # bool (k,): ``word_pcs.degenerate_words`` of the stored vectors


def _new_word_stats(k: int, d: int, with_vectors: bool) -> dict:
    nan = lambda: np.full(k, np.nan)  # noqa: E731
    return {"self_similarity": nan(), "mev": nan(), "mev_literal": nan(), "mev_centered": nan(),
            "first_vector": np.full((k, d), np.nan) if with_vectors else None,
            "total_var": nan(), "mean_sq": nan()}  # fmt: skip


SELF_SIMILARITY_CHUNK = 1024


def _self_similarity_rows(Y: np.ndarray) -> float:
    """Exact self-similarity of one word's rows (n, d): (|sum u_i|^2 - n) / (n (n - 1)) over nonzero rows.

    In float64, a chunk of rows at a time: the sum of n unit rows carries no float32 rounding, so a word
    whose occurrences are one vector has self-similarity 1 to machine precision.
    """
    total, count = np.zeros(Y.shape[1]), 0.0
    for start in range(0, len(Y), SELF_SIMILARITY_CHUNK):
        chunk = np.asarray(Y[start : start + SELF_SIMILARITY_CHUNK], dtype=np.float64)
        squared = np.einsum("ij,ij->i", chunk, chunk)
        nonzero = squared > 0
        inverse = np.zeros(len(chunk))
        inverse[nonzero] = 1.0 / np.sqrt(squared[nonzero])
        total += inverse @ chunk
        count += float(nonzero.sum())
    if count < 2:
        return float("nan")
    return float(np.clip((total @ total - count) / (count * count - count), -1.0, 1.0))


def _finish_words(out: dict, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean,
                  with_vectors: bool) -> None:
    """MEV variants (``word_pcs._finish``) of a batch of words from their spectra, written into ``out``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mev"][words] = np.minimum(projected_var / total_var, 1.0)
        out["mev_centered"][words] = np.minimum(centred_top / (total_var * n), 1.0)
        out["mev_literal"][words] = np.minimum(np.maximum(theta, 0.0) / (mean_sq * n), 1.0)
    out["total_var"][words], out["mean_sq"][words] = total_var, mean_sq
    if with_vectors:
        v1 = v1 / np.maximum(np.linalg.norm(v1, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        v1 *= np.where(np.einsum("kd,kd->k", v1, mean) < 0, -1.0, 1.0)[:, None]
        out["first_vector"][words] = v1


def _gram_batch(out: dict, words, C, row_sq, valid, n, mean, work_dtype, skip_tol, with_vectors) -> None:
    """Words of at most d occurrences, stacked (k, m, d) and zero-padded to m rows: Gram-matrix route.

    ``C`` holds the explicitly centred rows (padding rows 0), ``valid`` (k, m) marks real rows, ``mean``
    (k, d) float64 the words' means, ``row_sq`` (k, m) the squared norms of the uncentred rows (which
    rows are zero; None: the diagonal of the uncentred Gram matrix decides, for a variant's rows, which
    are not formed). X X^T follows from the centred Gram matrix by the mean's terms. Words with total_var
    <= skip_tol * mean_sq get no centred spectrum (their MEV is NaN anyway). Matrices of at most
    ``LAPACK_MAX`` rows are solved by LAPACK, larger ones by ``top_eigenpairs``.
    """
    e = valid.astype(work_dtype)
    padded = not valid.all()
    gram_c = np.matmul(C, np.swapaxes(C, 1, 2))
    a = np.matmul(C, mean.astype(work_dtype)[:, :, None])[:, :, 0]
    mean_norm2 = np.einsum("kd,kd->k", mean, mean)
    gram = gram_c.copy()
    gram += a[:, :, None]
    gram += a[:, None, :]
    gram += mean_norm2.astype(work_dtype)[:, None, None]
    if padded:  # padding rows and columns stay 0
        gram *= e[:, :, None]
        gram *= e[:, None, :]
    total_var = np.trace(gram_c, axis1=1, axis2=2, dtype=np.float64) / n
    mean_sq = total_var + mean_norm2
    # self-similarity from the normalised Gram matrix: sum_{i != j} cos = d^T G d - (nonzero rows), with
    # d_i = 1 / sqrt(G_ii) (so identical rows have cosine exactly 1); zero rows (from ``row_sq``: G_ii of a
    # zero row is a rounding residue) are left out
    diagonal = np.einsum("kmm->km", gram).astype(np.float64)
    nonzero = valid & (diagonal > 0)
    if row_sq is not None:
        nonzero &= np.asarray(row_sq) > 0
    inverse = np.where(nonzero, 1.0 / np.sqrt(np.where(nonzero, diagonal, 1.0)), 0.0)
    count = nonzero.sum(axis=1).astype(np.float64)
    pairs = count * count - count
    inverse_w = inverse.astype(work_dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        sums = np.einsum("ki,ki->k", inverse, np.matmul(gram, inverse_w[:, :, None])[:, :, 0].astype(np.float64)) - count
        out["self_similarity"][words] = np.where(pairs > 0, np.clip(sums / pairs, -1.0, 1.0), np.nan)
    centred_top = np.full(len(words), np.nan)
    live = total_var > skip_tol * mean_sq
    if C.shape[1] <= LAPACK_MAX:
        values, vectors = np.linalg.eigh(gram)
        theta, u1 = values[:, -1].astype(np.float64), vectors[:, :, -1].astype(np.float64)
        if live.any():
            centred_top[live] = np.linalg.eigvalsh(gram_c[live])[:, -1]
    else:
        theta, u1 = top_eigenpairs(gram, np.matmul(gram, e[:, :, None])[:, :, 0], valid)
        if live.any():
            centred_top[live], _ = top_eigenpairs(gram_c[live], None, valid[live])
    # C v1 = C X^T u1 / sigma_1 = (G_c + a 1^T) u1 / sigma_1
    u1w = u1.astype(work_dtype)
    projected = np.matmul(gram_c, u1w[:, :, None])[:, :, 0].astype(np.float64) + a.astype(np.float64) * (u1 * valid).sum(axis=1)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        projected_var = np.einsum("km,km->k", projected, projected) / (np.maximum(theta, 0.0) * n)
    v1 = None
    if with_vectors:
        v1 = np.matmul(u1w[:, None, :], C)[:, 0, :].astype(np.float64) + mean * (u1 * valid).sum(axis=1)[:, None]
    _finish_words(out, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, mean, with_vectors)


def _scatter_batch(out: dict, words, scatters, means, n, self_similarity, work_dtype, skip_tol,
                   with_vectors) -> None:
    """Words of more than d occurrences from their centred scatter matrices (k, d, d, work dtype) and means."""
    k, d, _ = scatters.shape
    total_var = np.trace(scatters, axis1=1, axis2=2, dtype=np.float64) / n
    mean_norm2 = np.einsum("kd,kd->k", means, means)
    mean_sq = total_var + mean_norm2
    outer = (np.sqrt(n)[:, None] * means).astype(work_dtype)
    uncentred = scatters + outer[:, :, None] * outer[:, None, :]
    theta, v1 = top_eigenpairs(uncentred, means)
    centred_top = np.full(k, np.nan)
    live = total_var > skip_tol * mean_sq
    if live.any():
        centred_top[live], _ = top_eigenpairs(scatters[live])
    v1w = v1.astype(work_dtype)
    projected_var = np.einsum("kd,kd->k", v1, np.matmul(scatters, v1w[:, :, None])[:, :, 0].astype(np.float64)) / n
    out["self_similarity"][words] = self_similarity
    _finish_words(out, words, total_var, mean_sq, n, theta, centred_top, projected_var, v1, means, with_vectors)


def word_stats(X: np.ndarray, rows: np.ndarray, group_starts: np.ndarray, transforms: list[Transform], *,
               degenerate_tol: float, work_dtype=np.float32, first_vectors: bool = True) -> dict[str, WordStats]:
    """Self-similarity and the MEV variants of every word, for the stored vectors and each variant.

    ``X`` is the layer (any float dtype); word i's occurrences are ``X[rows[group_starts[i]:group_starts[i + 1]]]``.
    Each word's rows are gathered and converted to ``work_dtype`` once; every transform is applied to
    them (its scatter matrix, for words of more than d occurrences, from the word's own). Degenerate
    words are those of the stored vectors (``word_pcs.degenerate_words`` with ``degenerate_tol``): their
    MEV variants are NaN in every variant (an affine map gives rows identical up to storage rounding no
    spread beyond rounding). ``first_vectors``: the first singular vectors of the untransformed words
    (of the first transform, which should be ``none``).
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
        self.X, self.transforms, self.tol, self.work_dtype = X, transforms, degenerate_tol, work_dtype
        self.first_vectors = first_vectors
        self.rows = np.asarray(rows, dtype=np.int64)
        self.group_starts = np.asarray(group_starts, dtype=np.int64)
        k, self.d = len(self.group_starts), X.shape[1]
        self.sizes = group_sizes(self.group_starts, len(self.rows))
        self.outs = {t.name: _new_word_stats(k, self.d, first_vectors and i == 0) for i, t in enumerate(transforms)}
        self.limit = min(STACK_MAX, self.d)

    def gram(self, words, block, valid, n) -> None:
        """Words stacked (k, m, d), zero-padded: the stored vectors centred once (in place); a variant's
        centred rows are its linear part applied to them (the shift cancels) and its mean the transform
        of their float64 mean, so no variant re-reads, re-sums or re-centres the rows."""
        # the mean of the rows themselves (float64), so that centring leaves no offset
        m = block.sum(axis=1, dtype=np.float64) / n[:, None]
        row_sq = np.einsum("kmd,kmd->km", block, block)
        subtract_in_two_parts(block, m)
        if not valid.all():
            block *= valid[:, :, None]
        for i, t in enumerate(self.transforms):
            if t.identity:
                C, mean, zero_rows = block, m, row_sq
            else:  # padding rows stay 0 under a linear map
                C, mean, zero_rows = t.linear_rows(block, self.work_dtype), t.vector(m), None
            _gram_batch(self.outs[t.name], words, C, zero_rows, valid, n.astype(np.float64), mean, self.work_dtype,
                        self.tol if i == 0 else 0.0, self.first_vectors and i == 0)

    def stacked(self) -> None:
        """Words of at most min(STACK_MAX, d) occurrences, stacked by size (no padding)."""
        X, rows, starts, sizes, d = self.X, self.rows, self.group_starts, self.sizes, self.d
        for size in np.unique(sizes[(sizes > 0) & (sizes <= self.limit)]):
            chosen = np.flatnonzero(sizes == size)
            per_batch = max(1, BATCH_ELEMENTS // (size * d))
            for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
                block = np.asarray(X[rows[starts[batch, None] + np.arange(size)]], dtype=self.work_dtype)
                self.gram(batch, block, np.ones((len(batch), size), dtype=bool), np.full(len(batch), size))

    def padded(self) -> None:
        """Words of up to d occurrences: padded to a multiple of PAD_STEP rows."""
        X, rows, starts, sizes, d = self.X, self.rows, self.group_starts, self.sizes, self.d
        medium = np.flatnonzero((sizes > self.limit) & (sizes <= d))
        bins = np.minimum(-(-sizes[medium] // PAD_STEP) * PAD_STEP, d)
        for m in np.unique(bins):
            chosen = medium[bins == m]
            per_batch = max(1, BATCH_ELEMENTS // (int(m) * d))
            for batch in np.array_split(chosen, -(-len(chosen) // per_batch)):
                n = sizes[batch]
                valid = np.arange(m)[None, :] < n[:, None]
                index = np.where(valid, starts[batch, None] + np.minimum(np.arange(m), n[:, None] - 1), 0)
                block = np.asarray(X[rows[index]], dtype=self.work_dtype)
                block *= valid[:, :, None]
                self.gram(batch, block, valid, n)

    def scattered(self) -> None:
        """Words of more than d occurrences: scatter matrices, one word at a time, solved in batches."""
        X, rows, starts, sizes, d, transforms = self.X, self.rows, self.group_starts, self.sizes, self.d, self.transforms
        work_dtype = self.work_dtype
        large = np.flatnonzero(sizes > d)
        per_batch = max(1, BATCH_ELEMENTS // (d * d))
        for batch in np.array_split(large, max(1, -(-len(large) // per_batch))) if len(large) else []:
            collected = {t.name: ([], [], []) for t in transforms}
            for word in batch:
                # an index gather is a new array already: centred in place below without a second copy
                block = np.asarray(X[rows[starts[word]:starts[word] + sizes[word]]], dtype=work_dtype)
                mean = block.sum(axis=0, dtype=np.float64) / len(block)
                for t in transforms[1:]:
                    collected[t.name][1].append(t.vector(mean))
                    collected[t.name][2].append(_self_similarity_rows(t.rows(block, work_dtype)))
                collected[transforms[0].name][1].append(mean)
                collected[transforms[0].name][2].append(_self_similarity_rows(block))
                subtract_in_two_parts(block, mean)
                scatter = block.T @ block
                for t in transforms:
                    collected[t.name][0].append(scatter if t.identity else t.sandwich(scatter).astype(work_dtype))
            for i, t in enumerate(transforms):
                scatters, means, ss = (np.array(v) for v in collected[t.name])
                _scatter_batch(self.outs[t.name], batch, scatters, means, sizes[batch].astype(np.float64), ss,
                               work_dtype, self.tol if i == 0 else 0.0, self.first_vectors and i == 0)

    def results(self) -> dict[str, WordStats]:
        """Every variant's ``WordStats``, the MEV variants NaN for the stored vectors' degenerate words."""
        first = self.outs[self.transforms[0].name]
        degenerate = first["total_var"] <= self.tol * first["mean_sq"]
        result = {}
        for t in self.transforms:
            o = self.outs[t.name]
            masked = [np.where(degenerate, np.nan, o[c]) for c in ("mev", "mev_literal", "mev_centered")]
            result[t.name] = WordStats(o["self_similarity"], *masked, o["first_vector"], degenerate)
        return result
