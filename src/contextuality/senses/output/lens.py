"""The output layer read at every layer: logit lens, own/next-token ranks, B3 and B4.

The lens maps a stored hidden state h to logits z through the model's own head (``models.heads``):
* a decoder: z = E·N_f(h) before the last layer, z = E·h at the last one (transformers already applied the
  final norm there: the layer file's ``after_final_norm``), plus the bias if any;
* a masked LM: z = E·T(h) + β at every layer, T = ``cls.predictions.transform`` (dense, GELU, LayerNorm).

A logit soft-cap (Gemma) is left out: it is monotone, so ranks are unchanged. Logits are computed in
batches of rows and ranks inside each batch, so memory stays at ``batch_rows``×V floats, never n×V.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from contextuality.models.heads import OutputHead

BATCH_ROWS = 1024  # 1,024 × 49,152 float32 logits (SmolLM2) = 200 MB per batch
TOP = 10  # the cut of top10 and of share_rank_lt_10
NO_TOKEN = -1  # a row without a target (B2: the last token of a sentence has no next token)


def _check_rows(head: OutputHead, rows: np.ndarray, what: str) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] != head.dim:
        raise ValueError(f"{what} has shape {rows.shape}; the head needs rows of size {head.dim} (n×{head.dim}): "
                         "pass the stored vectors of this model's layer")  # fmt: skip
    if not np.isfinite(rows).all():  # a NaN logit compares false with everything: it would rank first
        raise ValueError(f"{what} holds NaN or infinite values; only finite vectors can be ranked: drop those rows")
    return rows


def _check_ids(head: OutputHead, ids, n: int, what: str, *, allow_none: bool = False) -> np.ndarray:
    ids = np.asarray(ids)
    shapes = "(n,) or (n, k)" if allow_none else "(n,)"
    if ids.shape[:1] != (n,) or ids.ndim > (2 if allow_none else 1) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{what} has shape {ids.shape} and dtype {ids.dtype}; integer token ids of shape {shapes}, n = "
                         f"{n} rows, are needed: drop the rows that have none")  # fmt: skip
    lowest = NO_TOKEN if allow_none else 0
    if ids.size and (ids.min() < lowest or ids.max() >= head.vocab_size):
        none = f" ({NO_TOKEN}: no token)" if allow_none else ""
        raise ValueError(f"{what} holds ids outside {lowest}..{head.vocab_size - 1}{none}, the head's vocabulary: use "
                         "the ids of this model's tokenizer")  # fmt: skip
    return ids.astype(np.int64)


def _apply(module, batch):
    """A head module on a float32 batch, in the module's own dtype, back to float32."""
    import torch

    dtype = next(module.parameters(), torch.empty(0)).dtype
    with torch.no_grad():
        return module(batch.to(dtype)).float()


def _mapped(head: OutputHead, batch, after_final_norm: bool):
    """What the unembedding multiplies: T(h) for a masked LM, N_f(h) before a decoder's last layer, else h."""
    if head.kind == "masked":
        if after_final_norm:
            raise ValueError("after_final_norm is true for a masked LM's layer; it marks only a pre-norm decoder's "
                             "last layer: pass the layer file's own attribute, or the head of the right model")  # fmt: skip
        return _apply(head.transform, batch)
    if after_final_norm or head.final_norm is None:
        return batch
    return _apply(head.final_norm, batch)


def _batches(
    head: OutputHead, hidden: np.ndarray, after_final_norm: bool, batch_rows: int, *, logits: bool = True
) -> Iterator[tuple[slice, object]]:
    """(rows, logits or lens inputs of those rows) batch by batch, as float32 torch tensors."""
    import torch

    unembedding = torch.from_numpy(np.ascontiguousarray(head.unembedding, dtype=np.float32))
    bias = None if head.bias is None else torch.from_numpy(np.asarray(head.bias, dtype=np.float32))
    for start in range(0, hidden.shape[0], batch_rows):
        rows = slice(start, min(start + batch_rows, hidden.shape[0]))
        batch = torch.from_numpy(np.ascontiguousarray(hidden[rows], dtype=np.float32))
        mapped = _mapped(head, batch, after_final_norm)
        if not logits:
            yield rows, mapped
            continue
        with torch.no_grad():
            z = mapped @ unembedding.T
            yield rows, z if bias is None else z + bias


def lens_logits(
    head: OutputHead, hidden: np.ndarray, *, after_final_norm: bool, batch_rows: int = BATCH_ROWS
) -> np.ndarray:
    """The lens's logits (n×V float32) of the rows of one layer; for few rows (ranks: ``token_ranks``)."""
    return _stacked(head, hidden, after_final_norm, batch_rows, logits=True)


def lens_inputs(
    head: OutputHead, hidden: np.ndarray, *, after_final_norm: bool, batch_rows: int = BATCH_ROWS
) -> np.ndarray:
    """What the unembedding multiplies, row by row (n×d float32): N_f(h), h, or the masked LM's T(h)."""
    return _stacked(head, hidden, after_final_norm, batch_rows, logits=False)


def _stacked(head: OutputHead, hidden: np.ndarray, after_final_norm: bool, batch_rows: int, *, logits: bool):
    """``_batches``' logits (n×V) or lens inputs (n×d) of ``hidden``'s rows in one float32 array."""
    hidden = _check_rows(head, hidden, "hidden")
    out = np.empty((hidden.shape[0], head.vocab_size if logits else head.dim), dtype=np.float32)
    for rows, z in _batches(head, hidden, after_final_norm, batch_rows, logits=logits):
        out[rows] = z.numpy()
    return out


def lens_input_mean(
    head: OutputHead, hidden: np.ndarray, *, after_final_norm: bool, batch_rows: int = BATCH_ROWS
) -> np.ndarray:
    """m_ℓ of B4: the mean (d,) over all rows of the lens inputs (N_f(h), or T(h)), summed in float64."""
    hidden = _check_rows(head, hidden, "hidden")
    total = np.zeros(head.dim, dtype=np.float64)
    for _, mapped in _batches(head, hidden, after_final_norm, batch_rows, logits=False):
        total += mapped.double().sum(0).numpy()
    return total / max(hidden.shape[0], 1)


def token_ranks(
    head: OutputHead, hidden: np.ndarray, token_ids, *, after_final_norm: bool, batch_rows: int = BATCH_ROWS
) -> np.ndarray:
    """B1/B2: r = #{v : z[v] > z[t]} for each row and its token t (0 = the lens's top-1), int64.

    ``token_ids`` (n,) or (n, k): k targets per row ranked under the same logits (own and next token in one
    pass); ``NO_TOKEN`` (-1) marks a row without that target, whose rank is -1 (``rank_summary`` skips it).
    """
    import torch

    hidden = _check_rows(head, hidden, "hidden")
    ids = _check_ids(head, token_ids, hidden.shape[0], "token_ids", allow_none=True)
    flat = ids.reshape(hidden.shape[0], -1)
    ranks = np.empty(flat.shape, dtype=np.int64)
    for rows, z in _batches(head, hidden, after_final_norm, batch_rows):
        chosen = torch.from_numpy(flat[rows])
        target = z.gather(1, chosen.clamp_min(0))  # batch × k
        counts = torch.stack([(z > target[:, [j]]).sum(1) for j in range(flat.shape[1])], 1)
        ranks[rows] = torch.where(chosen >= 0, counts, NO_TOKEN).numpy()
    return ranks.reshape(ids.shape)


def rank_summary(ranks) -> dict:
    """``top1``, ``top10`` (shares of rank 0 and rank < 10), ``median_rank``, ``mean_log2_rank`` (mean
    log2(1 + r)) and ``n`` over the ranks that are not -1 (no target); NaN when none is left."""
    ranks = np.asarray(ranks, dtype=np.float64).ravel()
    ranks = ranks[ranks != NO_TOKEN]
    if ranks.size == 0:
        return {"top1": float("nan"), "top10": float("nan"), "median_rank": float("nan"),
                "mean_log2_rank": float("nan"), "n": 0}  # fmt: skip
    return {"top1": float(np.mean(ranks == 0)), "top10": float(np.mean(ranks < TOP)),
            "median_rank": float(np.median(ranks)), "mean_log2_rank": float(np.mean(np.log2(1 + ranks))),
            "n": int(ranks.size)}  # fmt: skip


def frequency_baseline_ranks(token_ids, token_counts) -> np.ndarray:
    """B3: each token's rank under the unigram score: #{v : count[v] > count[t]} (ties not counted), int64.

    ``token_counts`` (V,): the corpus's own count of every token id under the model's tokenisation.
    """
    counts = np.asarray(token_counts)
    if counts.ndim != 1 or (counts.size and counts.min() < 0):
        raise ValueError(f"token_counts has shape {counts.shape}; one non-negative count per vocabulary id (V,) is "
                         "needed: count the corpus's tokens with np.bincount(ids, minlength=V)")  # fmt: skip
    ids = np.asarray(token_ids)
    if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= counts.size):
        raise ValueError(f"token_ids must be integer ids in 0..{counts.size - 1} (the length of token_counts); "
                         "count every id of the model's vocabulary")  # fmt: skip
    ordered = np.sort(counts)
    return (counts.size - np.searchsorted(ordered, counts[ids], side="right")).astype(np.int64)


def centroid_alignment(
    head: OutputHead,
    centroids: np.ndarray,
    token_ids,
    null_token_ids,
    *,
    after_final_norm: bool,
    layer_mean,
    batch_rows: int = BATCH_ROWS,
) -> dict:
    """B4: the alignment of each word's centroid with its own output row, against a frequency-matched null.

    a_w = cos(M(c_w) − m, e_t − ē), with M the lens input map (N_f for a decoder before its last layer, the
    identity at the last one, the masked LM's transform T at every layer), m = ``layer_mean`` = the mean of
    M over all the layer's rows (``lens_input_mean``; for a masked LM the transformed rows' mean, not T of
    the layer mean), e_v the output rows and ē their mean. rank: #{v : cos(·, e_v − ē) > a_w};
    null_rank: the same for the row e_t' of another, frequency-matched word t' = ``null_token_ids[w]``.
    Returns ``cos``, ``rank``, ``null_cos``, ``null_rank`` (arrays, one per word) and ``summary``.
    """
    import torch

    centroids = _check_rows(head, centroids, "centroids")
    ids = _check_ids(head, token_ids, centroids.shape[0], "token_ids")
    null_ids = _check_ids(head, null_token_ids, centroids.shape[0], "null_token_ids")
    mean = np.asarray(layer_mean, dtype=np.float64)
    if mean.shape != (head.dim,):
        raise ValueError(f"layer_mean has shape {mean.shape}; ({head.dim},) is needed: lens_input_mean of the layer")
    rows = np.asarray(head.unembedding, dtype=np.float64)
    rows = rows - rows.mean(0)
    unit = torch.from_numpy((rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)).astype(np.float32))
    out = {name: np.empty(centroids.shape[0], dtype=dtype)
           for name, dtype in (("cos", np.float64), ("rank", np.int64), ("null_cos", np.float64), ("null_rank", np.int64))}  # fmt: skip
    shift = torch.from_numpy(mean.astype(np.float32))
    for part, mapped in _batches(head, centroids, after_final_norm, batch_rows, logits=False):
        query = mapped - shift
        query = query / query.norm(dim=1, keepdim=True).clamp_min(1e-30)
        cosines = query @ unit.T  # batch × V
        for name, chosen in (("", ids), ("null_", null_ids)):
            target = cosines.gather(1, torch.from_numpy(chosen[part])[:, None])
            out[f"{name}cos"][part] = target[:, 0].double().numpy()
            out[f"{name}rank"][part] = (cosines > target).sum(1).numpy()
    out["summary"] = alignment_summary(out, head.vocab_size)
    return out


def alignment_summary(out: dict, vocab_size: int) -> dict:
    """Medians, shares of rank < 10 (chance 10/V) and mean cosines, for the words and for the null."""
    n = int(out["rank"].size)

    def stat(values, how):
        return float(how(values)) if n else float("nan")

    return {"median_rank": stat(out["rank"], np.median), "null_median_rank": stat(out["null_rank"], np.median),
            "share_rank_lt_10": stat(out["rank"] < TOP, np.mean),
            "null_share_rank_lt_10": stat(out["null_rank"] < TOP, np.mean),
            "chance_share": TOP / vocab_size, "mean_cos": stat(out["cos"], np.mean),
            "null_mean_cos": stat(out["null_cos"], np.mean), "n": n}  # fmt: skip
