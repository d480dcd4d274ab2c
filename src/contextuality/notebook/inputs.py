"""What ``contextuality.study`` is given, made into what the pipeline's jobs take: the run's settings from a config
(the schema's defaults filled in, as the workflow fills them), the model as a config entry or a loaded model, and
the sentences as the corpus rule's sentence table."""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path
from typing import NamedTuple

from contextuality.core.settings import Settings
from contextuality.workflow.schema import load_settings

# What ``model`` may be, said whenever another value is given.
ALLOWED_MODELS = (
    "a Hugging Face model folder (holding config.json), a .gguf file, a transformers model already loaded "
    "(with tokenizer=its tokenizer), a model entry of a config (a dict with the keys of config/README.md#models), "
    "or the key of a model in config's models"
)
ALLOWED_SENTENCES = "an iterable of at least 2 strings, or None (the config's corpus)"
# The model key of a model given without one: a folder's or file's name made a key, or this.
UNNAMED = "model"


class ModelInput(NamedTuple):
    """The model as the run's settings see it (``key`` and its config ``entry``), and the model object when one
    was given already loaded (else None: built from ``entry`` as the pipeline builds it)."""

    key: str
    entry: dict
    loaded: object | None = None
    tokenizer: object | None = None


def config_dict(config) -> dict:
    """A config as a dict: a YAML file's path, a dict (copied), or None (every setting the schema's default)."""
    import yaml

    if config is None:
        return {}
    if isinstance(config, (str, Path)):
        return yaml.safe_load(Path(config).read_text()) or {}
    if isinstance(config, dict):
        return copy.deepcopy(config)
    raise TypeError(f"config is a {type(config).__name__}; allowed: a YAML file's path, a dict, or None")


def run_settings(config: dict, model: ModelInput, *, panel: bool) -> Settings:
    """The settings of ``config`` with ``model`` its one model, validated against the schema, the defaults filled
    in; ``panel`` turns the geometry panel on or off (``metrics.geometry``)."""
    config = {**config, "models": {model.key: model.entry}}
    config["metrics"] = {**config.get("metrics", {}), "geometry": bool(panel)}
    return load_settings(config)


def model_input(model, config: dict, tokenizer, options: dict | None) -> ModelInput:
    """What ``model`` is (see ``ALLOWED_MODELS``), with ``options`` (a model entry's keys: indexing, pooling,
    max_length, ...) over its entry."""
    options = dict(options or {})
    if hasattr(model, "config") and hasattr(model, "forward"):  # a torch module with a transformers config
        if tokenizer is None:
            raise ValueError("a model already loaded needs its tokenizer: study(model, sentences, tokenizer=...)")
        name = getattr(model.config, "name_or_path", "") or UNNAMED
        return ModelInput(key_of(Path(name).name), {"source": "path", "path": name, **options}, model, tokenizer)
    if tokenizer is not None:
        raise ValueError(f"tokenizer= goes with a model already loaded; model is {model!r}")
    if isinstance(model, dict):
        return ModelInput(UNNAMED, {**model, **options})
    if isinstance(model, (str, Path)):
        configured = config.get("models") or {}
        if isinstance(model, str) and model in configured:
            return ModelInput(model, {**configured[model], **options})
        path = Path(model).expanduser()
        if path.is_file() and path.suffix == ".gguf":
            entry = {"source": "path", "path": str(path.resolve().parent), "gguf_file": path.name}
            return ModelInput(key_of(path.stem), {**entry, **options})
        if (path / "config.json").is_file():
            return ModelInput(key_of(path.resolve().name), {"source": "path", "path": str(path.resolve()), **options})
        raise ValueError(f"model {str(model)!r} is neither a Hugging Face folder (no config.json there), a .gguf file "
                         f"nor a key of config's models; allowed: {ALLOWED_MODELS}")  # fmt: skip
    raise TypeError(f"model is a {type(model).__name__}; allowed: {ALLOWED_MODELS}")


def key_of(name: str) -> str:
    """A model key (letters, digits, '_' and '-', as the schema asks) from a folder's or file's name."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_") or UNNAMED


def sentence_table(sentences, settings: Settings):
    """The corpus rule's sentence table: of ``sentences`` (strings, cleaned as every corpus is, an empty one
    refused), or with None the config's corpus (``corpus``: the bundled STS sentences, the hub's, a file, a table
    or a dataset), read as the corpus rule reads it."""
    import pandas as pd

    from contextuality.corpus.sources import is_sts, load_source, to_sentences

    if sentences is None:
        corpus = settings.corpus
        return sts_sentences(corpus) if is_sts(corpus.source) else load_source(corpus)[0]
    if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__iter__"):
        raise TypeError(f"sentences is a {type(sentences).__name__}; allowed: {ALLOWED_SENTENCES}")
    texts = list(sentences)
    if len(texts) < 2 or not all(isinstance(text, str) for text in texts):
        problem = f"{len(texts)} sentence(s)" if len(texts) < 2 else "an item that is not a string"
        raise ValueError(f"sentences holds {problem}; allowed: {ALLOWED_SENTENCES}")
    table = pd.DataFrame({"text": texts, "source_id": [f"item {i}" for i in range(len(texts))], "group": ""})
    table.attrs["where"] = [f"sentences[{i}]" for i in range(len(texts))]
    return to_sentences(table, "text", "sentences", None)


def sts_sentences(corpus):
    """The STS sentences of ``corpus`` (``CorpusSettings``: bundled or hub, its years and max_sentences) as the
    sts_pairs and corpus rules make them."""
    import pandas as pd

    from contextuality.corpus.sts import build_corpus, write_bundled_pairs

    with tempfile.TemporaryDirectory(prefix="contextuality-corpus-") as folder:
        pairs = None
        if corpus.source == "bundled":
            pairs = Path(folder) / "pairs.jsonl"
            write_bundled_pairs(Path(corpus.bundled_dir), list(corpus.years), corpus.include_2012_train, pairs)
        build_corpus(Path(folder) / "sentences.parquet", source=corpus.source, pairs_jsonl=pairs,
                     years=list(corpus.years), include_2012_train=corpus.include_2012_train,
                     max_sentences=corpus.max_sentences, hub_revisions=corpus.hub_revisions)  # fmt: skip
        return pd.read_parquet(Path(folder) / "sentences.parquet")
