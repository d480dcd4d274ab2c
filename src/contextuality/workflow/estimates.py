"""What each heavy job needs: its memory (MB) and runtime (minutes), declared to the scheduler (the whole run's
disk and time, told before any job, are ``contextuality.workflow.run_need``'s).

Cluster schedulers kill a job at its limits, so these are upper bounds, calibrated on the project's
2-core machine (docs/scaling.md shows the arithmetic); each doubles on a retry (``attempt``). Before
a model is built (a dry run, the DAG's planning) its shape is not known and the paper's largest is
assumed.

Calibration of the extraction estimates:

* ``EXTRACT_BASE_MB``: Python + torch + transformers + pandas + h5py imported and a model built
  measured 464 MB peak RSS (``/usr/bin/time -v``); doubled for the tokenised shard, DataFrames and a
  CUDA context's host memory.
* STS sentences: ~330k WordPieces over 25,088 sentences = 13.2 per sentence, plus 2 special tokens
  (the default run's MiniLM tokenizer measured 359k tokens with [CLS]/[SEP] = 14.3 per sentence). A
  padded batch is bounded by 128 tokens per sentence and a window's mean by 64 units per sentence (the
  longest STS sentences sort together into one batch; no window averages more than that). Once the plan
  exists (before any shard job) its lengths replace these bounds where larger: the shard's longest
  sentence sets a pass, its widest window the pooled vectors. With ``max_batch_tokens`` a pass holds at
  most that many tokens, or one sentence alone when it is longer; a window (4 x ``batch_size`` sentences)
  is not capped by it.
* CPU throughput: all-MiniLM-L6-v2 (23M parameters) ran ~1,500 tokens/s on 2 cores (2,000-3,300 in
  later runs); time per token scales with the parameter count (2 FLOPs per parameter and token).
  Check: SmolLM2-135M predicted 256 tokens/s, measured 185 on a loaded machine, well inside the
  runtime bound (x2 + 10 min).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from contextuality.core.settings import (
    SENSE_LAYER_DTYPE,
    WINDOW_BATCHES,
    CorpusSettings,
    MeasureSettings,
    MetricsSettings,
    ModelSettings,
    shard_bounds,
)
from contextuality.models.loading import record_shape, record_weights_bytes
from contextuality.senses import memory as sense_memory

EXTRACT_BASE_MB = 1000
TOKENS_PER_SENTENCE = 15
MAX_SENTENCE_TOKENS = 128
MAX_WINDOW_UNITS = 64
CPU_TOKENS_PER_S_23M = 1500
STS_SENTENCES = 25088
# Before a model is built: the largest shape of the paper's models (BERT-base/GPT-2 13 x 768, ELMo 3 x 1024)
UNBUILT_SHAPE = (13, 1024)
# Before a manifest exists: the paper's largest layer, 330k WordPieces x 1024 dims
UNBUILT_LAYER_ELEMENTS = 330_000 * 1024
MEASURE_BASE_MB = 1024
# Before a plan exists: the rows of the paper's largest layer
UNBUILT_ROWS = 330_000


def shard_sentences(model: ModelSettings, corpus: CorpusSettings, tokens_path: str | Path | None = None) -> int:
    """Sentences in the largest shard of a model, cut as the shard jobs cut them (``shard_bounds``: between
    windows of WINDOW_BATCHES x batch_size sentences), of the plan's sentences (``tokens.parquet``, one row per
    sentence) once it exists, as any corpus may be read; before it, the STS corpus's (or ``corpus.max_sentences``)."""
    if tokens_path is not None and Path(tokens_path).is_file():
        import pyarrow.parquet as pq  # the footer only: no pandas in the Snakefile's process

        n_sentences = pq.read_metadata(tokens_path).num_rows
    else:
        n_sentences = corpus.max_sentences or STS_SENTENCES
    window = WINDOW_BATCHES * model.batch_size
    return max(
        last - first
        for first, last in (shard_bounds(n_sentences, model.n_shards, shard, window) for shard in range(model.n_shards))
    )


def batch_tokens(model: ModelSettings, longest: int = MAX_SENTENCE_TOKENS) -> int:
    """Most padded tokens in one forward pass: batch_size sentences of at most ``longest`` tokens, or fewer under
    the model's ``max_batch_tokens`` (a longer sentence runs alone, so never fewer than one sentence's)."""
    tokens = model.batch_size * longest
    if model.max_batch_tokens is not None:
        tokens = min(tokens, max(model.max_batch_tokens, longest))
    return tokens


def shard_shape(model: ModelSettings, tokens_path: str | Path | None, shard: int | None) -> tuple[int, int]:
    """The longest sentence (tokens) of a shard and its widest window (tokens: at least its units), from the plan
    once it exists; never below STS's calibrated bounds (128 tokens a sentence, 64 units a window's sentence)."""
    window = WINDOW_BATCHES * model.batch_size
    longest, widest = MAX_SENTENCE_TOKENS, window * MAX_WINDOW_UNITS
    lengths = None if tokens_path is None or shard is None else plan_lengths(tokens_path)
    if lengths is not None:
        import numpy as np

        first, last = shard_bounds(len(lengths), model.n_shards, shard, window)
        mine = lengths[first:last]
        if len(mine):
            longest = max(longest, int(mine.max()))
            widest = max(widest, int(np.add.reduceat(mine, np.arange(0, len(mine), window)).max()))
    return longest, widest


def plan_lengths(tokens_path: str | Path):
    """Each planned sentence's tokens (``tokens.parquet``'s ``input_ids``), read in batches; None before the plan
    exists. Kept per file and time: the Snakefile asks for every shard of a model."""
    path = Path(tokens_path)
    try:
        stamp = path.stat()
    except OSError:
        return None
    key = (str(path.resolve()), stamp.st_mtime_ns, stamp.st_size)
    if key not in _PLAN_LENGTHS:
        import numpy as np
        import pyarrow.compute as pc
        import pyarrow.parquet as pq  # no pandas in the Snakefile's process

        batches = pq.ParquetFile(path).iter_batches(columns=["input_ids"], batch_size=65_536)
        parts = [pc.list_value_length(batch.column(0)).to_numpy(zero_copy_only=False) for batch in batches]
        _PLAN_LENGTHS[key] = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    return _PLAN_LENGTHS[key]


_PLAN_LENGTHS: dict = {}


def extraction_mem_mb(
    model: ModelSettings,
    record_path: str | Path,
    attempt: int = 1,
    tokens_path: str | Path | None = None,
    shard: int | None = None,
) -> int:
    """Host memory (MB) of one shard job, from the model's size and shape and its batches.

    weights twice (the checkpoint and the built model while loading) + one pass's hidden states of
    every layer (``batch_tokens`` of the shard's longest sentence; float32, the torch tensor and its numpy
    copy) + one window of pooled unit vectors (its widest window) + the interpreter; x attempt on retries.
    The sentences' lengths come from the plan (``shard_shape``): a corpus of paragraphs is not sized as STS.
    Vectors go to HDF5 window by window, so the shard's size does not add to the peak.
    """
    weights_mb = record_weights_bytes(record_path) / 1e6
    layers, dim = record_shape(record_path) or UNBUILT_SHAPE
    vector_bytes = layers * dim * 4 * 2
    longest, widest = shard_shape(model, tokens_path, shard)
    batch_mb = batch_tokens(model, longest) * vector_bytes / 1e6
    window_mb = widest * vector_bytes / 1e6
    return int((EXTRACT_BASE_MB + 2 * weights_mb + batch_mb + window_mb) * attempt)


def extraction_runtime_min(model: ModelSettings, corpus: CorpusSettings, record_path: str | Path, attempt: int = 1,
                           tokens_path: str | Path | None = None) -> int:  # fmt: skip
    """Minutes for one shard from the model size and the shard's share of sentences (``shard_sentences``).

    CPU-calibrated, so an upper bound on a GPU; 10 minutes are added for start-up and model loading,
    and the whole doubles per retry.
    """
    params_m = max(record_weights_bytes(record_path) / 4e6, 1.0)  # fp32 bytes -> millions of parameters
    seconds = shard_sentences(model, corpus, tokens_path) * TOKENS_PER_SENTENCE * params_m / (CPU_TOKENS_PER_S_23M * 23)
    return int((10 + 2 * seconds / 60) * attempt)


def measure_mem_mb(measure: MeasureSettings, manifest_path: str | Path, attempt: int = 1) -> int:
    """MB of one measurement job: its budget, ``metrics.memory_mb`` (``measure.engine.streaming`` keeps the job
    within it whatever the layer's size: a larger layer is read in chunks); x attempt. The manifest is
    not needed: the budget, not the corpus, sets the job's memory."""
    return int(measure.memory_mb * attempt)


def whole_layer_mem_mb(manifest_path: str | Path, attempt: int = 1) -> int:
    """MB of the sense job, which holds one whole layer at a time in ``core.settings.SENSE_LAYER_DTYPE`` (not
    ``metrics.compute_dtype``, which it never reads): the layer, batches of words, 1 GiB for the interpreter
    and the rest; x attempt.

    rows x dim come from the model's manifest; before it exists, the paper's largest layer is assumed.
    """
    work_bytes = int(SENSE_LAYER_DTYPE.removeprefix("float")) // 8
    try:
        shape = json.loads(Path(manifest_path).read_text())
        elements = shape["rows"] * shape["dim"]
    except (OSError, ValueError, KeyError):
        elements = UNBUILT_LAYER_ELEMENTS
    return int((elements * work_bytes / 1e6 + sense_memory.WORD_BATCHES_MB + sense_memory.WORK_BASE_MB) * attempt)


def device_measure_mem_mb(
    model: ModelSettings,
    metrics: MetricsSettings,
    record_path: str | Path,
    attempt: int = 1,
    tokens_path: str | Path | None = None,
    *,
    units_path: str | Path | None = None,
    storage_dtype: str = "float32",
    gpus: int = 0,
    machine_bytes: int | None = None,
) -> int:
    """Host memory (MB) of one ``measure_model`` job; x attempt.

    On a GPU (``gpus``): a shard job's (the model and its passes, ``extraction_mem_mb``, over every sentence of
    the plan) plus ``metrics.memory_mb`` (the occurrence index, the units, the drawn rows and the per-layer
    tables); its layers are in the GPU's memory. On torch's CPU backend the layers are in the host's: what the job
    holds (``device_plan.held_bytes``: the interpreter, the model twice while loading), its reserve (a forward
    pass, a window, the measurement's work) and every layer of its part at once (rows x dim x the storage dtype's
    bytes), so one forward pass measures them; capped at ``metrics.device_memory_fraction`` of ``machine_bytes``
    (this machine's memory, ``machine_memory_bytes``; None on a cluster, whose nodes are not this machine): a
    job given less plans more groups (``device_plan.plan_groups``)."""
    whole = dataclasses.replace(model, n_shards=1)
    if gpus:
        return int(extraction_mem_mb(whole, record_path, 1, tokens_path, 0) + metrics.measure.memory_mb) * attempt
    layers = (record_shape(record_path) or UNBUILT_SHAPE)[0]
    part = -(-layers // metrics.device.device_parts)  # the largest part's layers
    return cpu_device_job_mb(
        model, record_path, [tokens_path], rows=plan_rows(units_path), layers_at_once=part, models=1,
        storage_dtype=storage_dtype, fraction=metrics.device.device_memory_fraction, machine_bytes=machine_bytes,
        attempt=attempt,
    )  # fmt: skip


def device_senses_mem_mb(
    model: ModelSettings,
    metrics: MetricsSettings,
    record_path: str | Path,
    attempt: int = 1,
    *,
    tokens_paths: list,
    units_paths: list,
    storage_dtype: str = "float32",
    gpus: int = 0,
    machine_bytes: int | None = None,
) -> int:
    """Host memory (MB) of one ``measure_senses`` job on the device path (``senses.device``); x attempt. Both
    corpora's plans (``tokens_paths``, ``units_paths``: the study's, the usages'), and beside what
    ``device_measure_mem_mb`` counts for a whole model, a second model (the one with its output head) and the sense
    measures' work (``senses.memory.work_bytes``: a layer of both corpora in float32, batches of words). On torch's
    CPU backend every layer of both corpora at once, capped as ``device_measure_mem_mb``'s."""
    rows = sum(plan_rows(path) for path in units_paths)
    layers, dim = record_shape(record_path) or UNBUILT_SHAPE
    work = sense_memory.work_bytes(rows, dim)
    if gpus:
        whole = dataclasses.replace(model, n_shards=1)
        head = 2 * record_weights_bytes(record_path)  # the model with its output head, twice while loading
        return int(extraction_mem_mb(whole, record_path, 1, tokens_paths[0], 0) + (head + work) / 1e6) * attempt
    return cpu_device_job_mb(
        model, record_path, tokens_paths, rows=rows, layers_at_once=layers, models=2, sense_work_bytes=work,
        storage_dtype=storage_dtype, fraction=metrics.device.device_memory_fraction, machine_bytes=machine_bytes,
        attempt=attempt,
    )  # fmt: skip


def cpu_device_job_mb(model: ModelSettings, record_path: str | Path, tokens_paths: list, *, rows: int, layers_at_once: int,
                      models: int, storage_dtype: str, fraction: float, machine_bytes: int | None, attempt: int,
                      sense_work_bytes: int | None = None) -> int:  # fmt: skip
    """MB (of 2**20 bytes, as the job plans) of a device job on torch's CPU backend that holds ``layers_at_once``
    layers of ``rows`` rows: the job's own arithmetic (``measure.device.plan``: ``held_bytes`` of ``models`` models,
    ``reserve_bytes`` of its largest pass and widest window, from the plans once they exist, the host part, and
    the measures' work: the layer measurement's, or ``sense_work_bytes`` for the sense job's), x attempt, capped at
    ``fraction`` of ``machine_bytes``."""
    import numpy as np

    from contextuality.measure.device import (
        plan as device_plan,  # the measurement's libraries: not in the Snakefile's start
    )
    from contextuality.measure.engine.streaming import BASE_MB

    whole = dataclasses.replace(model, n_shards=1)
    n_layers, dim = record_shape(record_path) or UNBUILT_SHAPE
    shapes = [shard_shape(whole, path, 0) for path in tokens_paths]
    longest, widest = max(shape[0] for shape in shapes), max(shape[1] for shape in shapes)
    itemsize = np.dtype(storage_dtype).itemsize
    reserve = device_plan.reserve_bytes(d=dim, n_layers=n_layers, batch_tokens=batch_tokens(whole, longest),
                                        widest_window=widest, itemsize=itemsize, on_cuda=False,
                                        layer_measures=sense_work_bytes is None)  # fmt: skip
    reserve += BASE_MB * device_plan.MB + (sense_work_bytes or 0)
    held = device_plan.held_bytes(record_weights_bytes(record_path), models)
    need = device_plan.cpu_job_bytes(
        held=held, reserve=reserve, layer_bytes=rows * dim * itemsize, n_layers=layers_at_once
    )
    declared = need * attempt
    if machine_bytes:
        declared = min(declared, int(fraction * machine_bytes))
    return -(-declared // device_plan.MB)


def plan_rows(units_path: str | Path | None) -> int:
    """The rows a plan stores (``units.parquet``'s footer), or before it exists the paper's largest layer's."""
    if units_path is not None and Path(units_path).is_file():
        import pyarrow.parquet as pq  # the footer only: no pandas in the Snakefile's process

        return pq.read_metadata(units_path).num_rows
    return UNBUILT_ROWS


def machine_memory_bytes() -> int | None:
    """This machine's physical memory, from ``os.sysconf`` (pages x page size: POSIX, the same on Linux and macOS,
    nothing to parse; Linux's /proc/meminfo ``MemTotal`` is the same figure), or None where the system does not say.
    A container's memory limit is not seen: there, bound the jobs with ``--resources mem_mb=N``."""
    import os

    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page if pages > 0 and page > 0 else None


def device_measure_runtime_min(
    model: ModelSettings,
    corpus: CorpusSettings,
    metrics: MetricsSettings,
    record_path: str | Path,
    attempt: int = 1,
    tokens_path: str | Path | None = None,
) -> int:
    """Minutes for one ``measure_model`` job: its forward passes over the whole corpus (a shard job's time for
    one shard of all sentences, CPU-calibrated: an upper bound on a GPU), twice over for the groups a small
    budget needs (groups in depth order cost about (groups + 1) / 2 full passes), and a CPU layer job's ten
    minutes per layer of its part; x attempt."""
    whole = dataclasses.replace(model, n_shards=1)
    layers = (record_shape(record_path) or UNBUILT_SHAPE)[0]
    part = -(-layers // metrics.device.device_parts)
    return int((2 * extraction_runtime_min(whole, corpus, record_path, 1, tokens_path) + 10 * part) * attempt)


def similarity_mem_mb(sample_paths, memory_mb: int, attempt: int = 1, mapped: bool = False) -> int:
    """MB of a similarity table job: the samples it holds whole (their files' sizes: uncompressed HDF5; none when
    ``mapped``, a sample of every row, ``similarity.max_rows: null``), the engine's budget ``metrics.memory_mb`` (its
    block-row accumulators and chunks stay within it) and the interpreter's; x attempt. Before a sample exists,
    the budget alone (the scheduler asks again on retry)."""
    held = 0 if mapped else sum(Path(path).stat().st_size for path in sample_paths if Path(path).is_file())
    return int((held / 1e6 + memory_mb + MEASURE_BASE_MB) * attempt)
