"""Loading a materialised model safely, and what its ``source.json`` says about it.

A model folder (``resources/models/{key}/model/``, built by ``contextuality.sources``) is a Hugging Face
folder or ELMo's options and weights. Loading recomputes the weights' sha256 against ``source.json``,
never sets ``trust_remote_code``, and refuses pickle weights (``.bin``) unless allowed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ELMO_OPTIONS, ELMO_WEIGHTS = "options.json", "weights.hdf5"

SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class ModelError(RuntimeError):
    """A model cannot be materialised or loaded; the message says which model and what to do."""


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def weight_files(hf_dir: Path) -> list[Path]:
    """The weight files of an HF folder (safetensors shards, or pickle ones)."""
    found = sorted(hf_dir.glob("*.safetensors"))
    return found or sorted(hf_dir.glob("pytorch_model*.bin"))


def weights_digest(files: list[Path]) -> str:
    """One sha256 for the weights: of the file itself, or of the sorted per-file digests when sharded."""
    if len(files) == 1:
        return sha256_of(files[0])
    joined = "".join(f"{path.name}:{sha256_of(path)}\n" for path in sorted(files))
    return hashlib.sha256(joined.encode()).hexdigest()


def check_weights_format(key: str, hf_dir: Path, allow_pickle: bool) -> None:
    """Refuse a folder whose only weights are pickles, which can run code when loaded."""
    has_safe = any((hf_dir / name).exists() for name in SAFE_WEIGHTS) or any(hf_dir.glob("*.safetensors"))
    has_pickle = any((hf_dir / name).exists() for name in PICKLE_WEIGHTS) or any(hf_dir.glob("*.bin"))
    if not has_safe and has_pickle and not allow_pickle:
        raise ModelError(
            f"model '{key}': {hf_dir} holds only pickle weights (.bin), which can execute code when loaded; "
            f"convert them to safetensors, or set models.{key}.allow_pickle: true if you trust the source"
        )
    if not has_safe and not has_pickle:
        raise ModelError(f"model '{key}': no weights (model.safetensors or pytorch_model.bin) in {hf_dir}")


def check_no_remote_code(key: str, hf_dir: Path) -> None:
    """Refuse a folder whose architecture exists only as Python code shipped with the weights.

    Such a config names its classes in ``auto_map``; loading it would need ``trust_remote_code=True``,
    which this pipeline never sets (the code would run with the user's rights).
    """
    from transformers import CONFIG_MAPPING

    config_path = hf_dir / "config.json"
    if not config_path.is_file():
        return
    try:
        hf_config = json.loads(config_path.read_text())
    except ValueError:
        raise ModelError(f"model '{key}': {config_path} is not valid JSON; re-download or fix the model folder") from None
    model_type = hf_config.get("model_type")
    if hf_config.get("auto_map") and model_type not in CONFIG_MAPPING:
        raise ModelError(
            f"model '{key}': {hf_dir} defines its architecture ({model_type!r}) in Python files that would have to "
            "run (trust_remote_code), which this pipeline never allows; use a model whose architecture "
            "transformers ships"
        )


def record_shape(record_path: str | Path) -> tuple[int, int] | None:
    """(layers returned, input layer included; vector size) from ``source.json``; None before it exists."""
    try:
        record = json.loads(Path(record_path).read_text())
        return int(record["n_layers"]), int(record["dim"])
    except (OSError, KeyError, ValueError):
        return None


def record_weights_bytes(record_path: str | Path) -> int:
    """Size of a materialised model's weight files, from ``source.json`` (0 before it exists)."""
    try:
        return int(json.loads(Path(record_path).read_text())["weights_bytes"])
    except (OSError, KeyError, ValueError):
        return 0


# --------------------------------------------------------------------------------------------------
# Loading


@dataclass
class LoadedModel:
    key: str
    tokenizer: object
    model: object
    record: dict
    max_length: int
    n_layers: int  # hidden states returned, input layer included


def verify_weights(record: dict, model_dir: str | Path) -> None:
    """Recompute the weights' sha256 and refuse files changed since they were materialised."""
    files = [Path(model_dir) / name for name in record["weights"]]
    missing = [str(path) for path in files if not path.exists()]
    if missing:
        raise ModelError(
            f"model '{record['key']}': weights missing: {', '.join(missing)}; delete {model_dir} and rerun "
            "snakemake to rebuild it"
        )
    digest = sha256_of(files[0]) if len(files) == 1 else weights_digest(files)
    if digest != record["weights_sha256"]:
        raise ModelError(
            f"model '{record['key']}': weights sha256 {digest} differs from the recorded "
            f"{record['weights_sha256']} (source.json); the files changed after download, refusing to load"
        )


def load_tokenizer(record: dict, model_dir: str | Path, max_length: int | None):
    """A model's fast tokenizer and its length limit (tokens, specials included), without loading the weights.

    The limit is the smallest of ``max_length`` (``models.{key}.max_length``; None: no limit of its own),
    the model's position limit and the tokenizer's own. Decoders without a pad token get one (padding is
    masked, any id will do).
    """
    from transformers import AutoConfig, AutoTokenizer

    hf_dir = Path(model_dir)
    check_no_remote_code(record["key"], hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir), trust_remote_code=False)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(
            f"model '{record['key']}': {hf_dir} has no fast (Rust) tokenizer, which alignment needs for character "
            "offsets; convert its tokenizer (tokenizer.json) or use another model"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    hf_config = AutoConfig.from_pretrained(str(hf_dir), trust_remote_code=False)
    hf_config = getattr(hf_config, "text_config", None) or hf_config
    limits = [
        max_length,
        getattr(hf_config, "max_position_embeddings", None),
        getattr(hf_config, "n_positions", None),
        tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None,
    ]
    return tokenizer, min(limit for limit in limits if limit)


FINAL_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_norm", "norm_f", "ln_final")


def final_norm(model) -> str:
    """The final norm a pre-norm decoder applies after its last block (GPT-2's ``ln_f``, Llama's ``norm``), or "".

    transformers returns the last hidden state after that norm, while every other hidden state is the
    raw residual stream: the last layer then has another geometry (geometry-metrics.md, token hygiene).
    """
    children = dict(model.named_children())
    for name in FINAL_NORM_NAMES:
        if name in children and "norm" in type(children[name]).__name__.lower():
            return name
    return ""


def load(record: dict, model_dir: str | Path, device: str, dtype: str, *, max_length: int | None,
         allow_pickle: bool) -> LoadedModel:
    """Tokenizer and base model (hidden states only) from the folder ``model_dir``, in eval mode on ``device``.

    ``max_length`` and ``allow_pickle`` are the model's settings (``models.{key}.*``).
    """
    import torch
    from transformers import AutoModel

    verify_weights(record, model_dir)
    hf_dir = str(model_dir)
    check_weights_format(record["key"], Path(hf_dir), allow_pickle)
    tokenizer, max_length = load_tokenizer(record, model_dir, max_length)
    model = AutoModel.from_pretrained(
        hf_dir,
        trust_remote_code=False,
        use_safetensors=not allow_pickle,
        dtype=getattr(torch, dtype),
    )
    model.eval().to(device)
    n_layers = model.config.num_hidden_layers + 1
    return LoadedModel(record["key"], tokenizer, model, record, max_length, n_layers)
