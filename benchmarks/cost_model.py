"""The pipeline's cost per stage from shapes alone: FLOPs, bytes read and written, peak memory.

    python benchmarks/cost_model.py          # the estimates table of docs/scaling.md

N rows (stored units) of d dims, L layers, s stored bytes per value (2: float16), w work bytes (4: float32),
O indexed occurrences in words of n_w occurrences each, P parameters, T tokens.

* Extraction (per model): 2 P T FLOPs (a forward pass); writes the store; peak host memory per shard job
  as ``workflow.estimates.extraction_mem_mb`` declares it (interpreter + 2 x weights + one batch of hidden
  states + one window of pooled vectors).
* Store: N L d s bytes (+0.1-0.2% for the chunks' checksums).
* Measurement (one job per layer, ``measure_layer``), the paper's measures (geometry off, post-processing
  ``none``, exact self-similarity):
    FLOPs = N d^2                        the moments (X^T X per block: exact MEV baseline)
          + sum_w n_w m_w d              each word's Gram (m_w = n_w, padded to 32 above 48) or scatter matrix
                                         (n_w > d: m_w = d)
          + sum_{n_w > 24} 48 m_w^2      one round of 12 Lanczos steps on the word's two matrices
          + 10 N d + 6 O d               norms, unit-row sums, centring; the words' gather and centring
  Bytes read: N d s when the layer fits ``metrics.memory_mb`` in the work dtype (``streaming.plan_memory``:
  read once, whole); else (chunks) min(N, 65,536) d s for the shift + N d s per pass + O d s to read the
  spilled occurrences back, and O d s written to the spill.
  Peak: F + N d w when whole, F + (budget - F) / 2 in chunks (a chunk's copies, or a word group's, use half
  of what the budget leaves), where F = ``BASE_MB`` + ``SQUARE_MATRICES`` d x d float64 matrices.
* Measurement with the default settings (post-processing none, standardize, abtt: V = 3 variants, k = d/100
  abtt axes; the geometry panel), roughly: the word terms V times, (V - 1) (10 N d) + 4 N d k for the
  variants' unit-row sums, 8 d^2 k + d^2 per large word and variant for its sandwiched scatter matrix,
  9 d^3 for abtt's eigen-solve, 3 x (G d^2 + 8 d^3 + 2 T^2 d) for the panel's three isotropy blocks
  (G = 5,000 rows, T = 1,000 TwoNN rows); in chunks a second pass over the layer, and two more where
  the layer has massive activations.
FLOPs are those executed: a matrix times its own transpose (the moments, the Gram and scatter matrices) is
BLAS's syrk in numpy, N d^2 rather than a general product's 2 N d^2; time follows at one thread's syrk rate
(``bench_scaling.py`` measures it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from contextuality.core.settings import WINDOW_BATCHES
from contextuality.measure.engine.eigen import LANCZOS_STEPS
from contextuality.measure.engine.layer_pass import SHIFT_ROWS
from contextuality.measure.engine.streaming import BASE_MB, SQUARE_MATRICES, plan_memory
from contextuality.measure.engine.word_stats import LAPACK_MAX, PAD_STEP, STACK_MAX
from contextuality.measure.reference.postprocess import abtt_components
from contextuality.workflow.estimates import EXTRACT_BASE_MB, MAX_SENTENCE_TOKENS, MAX_WINDOW_UNITS

MB = 2**20

# The corpus model (also the synthetic layers' vocabulary in bench_scaling.py): a Zipf vocabulary of one word
# type per ROWS_PER_TYPE rows, UNINDEXED_SHARE of the rows punctuation (never indexed), and a word indexed
# from MIN_OCCURRENCES occurrences. On STS's 330k rows: about 4,900 words over 76% of the rows.
ROWS_PER_TYPE = 15
UNINDEXED_SHARE = 0.15
MIN_OCCURRENCES = 5
# The default settings' panel: rows of the isotropy sample, rows of TwoNN's neighbour search, isotropy blocks
GEOMETRY_ROWS, TWONN_ROWS, ISOTROPY_BLOCKS = 5_000, 1_000, 3

STS = {"tokens": 330_000, "sentences": 25_088}
# name: (layers incl. the input layer, d, parameters, rows stored per STS, checkpoint bytes per parameter)
MODELS = {
    "bert-base": (13, 768, 110e6, 330_000, 4),  # per WordPiece (the paper's indexing)
    "gpt2": (13, 768, 124e6, 285_000, 4),  # per spaCy word (the paper's indexing)
    "8B-class": (33, 4096, 8.0e9, 330_000, 2),  # per piece; bf16 checkpoint
}


def zipf_weights(n_types: int) -> np.ndarray:
    """Probability of each word type, rank r having weight 1 / r."""
    weights = 1.0 / np.arange(1, n_types + 1)
    return weights / weights.sum()


def expected_word_sizes(n_rows: int) -> np.ndarray:
    """The indexed words' occurrence counts the corpus model expects in ``n_rows`` rows (largest first)."""
    n_types = max(50, n_rows // ROWS_PER_TYPE)
    sizes = np.floor((1 - UNINDEXED_SHARE) * n_rows * zipf_weights(n_types))
    return sizes[sizes >= MIN_OCCURRENCES].astype(np.int64)


def gram_rows(sizes: np.ndarray, d: int) -> np.ndarray:
    """The rows m of each word's matrix as ``word_stats`` forms it: n (stacked, n <= 48), n padded to a
    multiple of 32 (up to d), or d (a scatter matrix, n > d)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    padded = np.minimum(-(-sizes // PAD_STEP) * PAD_STEP, d)
    return np.where(sizes <= min(STACK_MAX, d), sizes, np.where(sizes <= d, padded, d))


def extraction_cost(
    params: float, tokens: int, layers: int, d: int, *, checkpoint_bytes: int = 4, batch: int = 64
) -> dict:
    """FLOPs of the forward passes and the peak host memory (MB, 1e6 bytes) of one shard job."""
    vector_bytes = layers * d * 4 * 2
    peak = (EXTRACT_BASE_MB + 2 * params * checkpoint_bytes / 1e6 + batch * MAX_SENTENCE_TOKENS * vector_bytes / 1e6
            + WINDOW_BATCHES * batch * MAX_WINDOW_UNITS * vector_bytes / 1e6)  # fmt: skip
    return {"flops": 2.0 * params * tokens, "peak_mb": peak}


def store_bytes(n_rows: int, layers: int, d: int, stored_bytes: int = 2) -> int:
    return n_rows * layers * d * stored_bytes


def measure_cost(n_rows: int, d: int, sizes, budget_mb: int, *, work_bytes: int = 4, stored_bytes: int = 2,
                 full: bool = False, massive: bool = False) -> dict:  # fmt: skip
    """One layer's measurement job (the module doc's formulas): FLOPs, bytes read and written, peak MB (2^20),
    whether the layer is read whole, and the passes over it. ``full``: the default settings (three
    variants, the geometry panel), else the paper's measures; ``massive``: the layer has massive activations
    (two more passes in chunks, default settings only)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    m = gram_rows(sizes, d).astype(np.float64)
    occurrences = float(sizes.sum())
    large = sizes > d
    word_products = float(np.sum(sizes * m * d))  # syrk: n (or d) products for each of m (m + 1) / 2 entries
    eigen = float(np.sum(np.where(sizes > LAPACK_MAX, 2 * 2 * LANCZOS_STEPS * m * m, 0.0)))
    flops = float(n_rows) * d * d + word_products + eigen + 10.0 * n_rows * d + 6.0 * occurrences * d
    if full:
        variants, k = 3, abtt_components(d)
        gram_only = float(np.sum(np.where(large, 0.0, sizes * m * d)))
        flops += (variants - 1) * (gram_only + eigen + 10.0 * n_rows * d) + 4.0 * n_rows * d * k
        flops += (variants - 1) * np.count_nonzero(large) * (8.0 * d * d * k + d * d) + 9.0 * d**3
        rows = min(GEOMETRY_ROWS, n_rows)
        flops += ISOTROPY_BLOCKS * (float(rows) * d * d + 8.0 * d**3 + 2.0 * min(TWONN_ROWS, rows) ** 2 * d)
    layer = float(n_rows) * d * stored_bytes
    plan = plan_memory(n_rows, d, work_bytes, budget_mb)
    fixed_mb = BASE_MB + SQUARE_MATRICES * d * d * 8 / MB
    if plan.whole:
        passes, read, written = 1, layer, 0.0
        peak = fixed_mb + n_rows * d * work_bytes / MB
    else:
        passes = 1 + (1 if full else 0) + (2 if full and massive else 0)
        spill = occurrences * d * stored_bytes
        read = min(SHIFT_ROWS, n_rows) * d * stored_bytes + passes * layer + spill
        written = spill
        peak = fixed_mb + (budget_mb - fixed_mb) / 2
    return {"flops": flops, "bytes_read": read, "bytes_written": written, "peak_mb": peak, "whole": plan.whole,
            "passes": passes}  # fmt: skip


def estimates(budget_mb: int = 2048, scale: tuple[int, ...] = (1, 10)) -> pd.DataFrame:
    """The cost model on bert-base, gpt2 and an 8B-class model, on STS and on ``scale`` times STS: per stage."""
    out = []
    for times in scale:
        tokens = STS["tokens"] * times
        for name, (layers, d, params, sts_rows, checkpoint) in MODELS.items():
            n_rows = sts_rows * times
            sizes = expected_word_sizes(n_rows)
            extraction = extraction_cost(params, tokens, layers, d, checkpoint_bytes=checkpoint)
            paper = measure_cost(n_rows, d, sizes, budget_mb)
            full = measure_cost(n_rows, d, sizes, budget_mb, full=True)
            out.append({
                "model": name, "corpus": "STS" if times == 1 else f"{times} x STS", "rows": n_rows, "words": len(sizes),
                "extract_PFLOP": extraction["flops"] / 1e15, "extract_peak_GB": extraction["peak_mb"] / 1e3,
                "store_GB": store_bytes(n_rows, layers, d) / 1e9,
                "measure_TFLOP/layer": paper["flops"] / 1e12, "default_TFLOP/layer": full["flops"] / 1e12,
                "read_GB/layer": paper["bytes_read"] / 1e9, "default_read_GB/layer": full["bytes_read"] / 1e9,
                "spill_GB/layer": paper["bytes_written"] / 1e9, "peak_MB/job": paper["peak_mb"],
                "mode": "whole" if paper["whole"] else "chunks", "measure_TFLOP/model": layers * paper["flops"] / 1e12,
            })  # fmt: skip
    return pd.DataFrame(out)


if __name__ == "__main__":
    print("cost model estimates, metrics.memory_mb 2048, float16 store, float32 work (benchmarks/cost_model.py)\n")
    print(estimates().to_markdown(index=False, floatfmt=".3g"))
