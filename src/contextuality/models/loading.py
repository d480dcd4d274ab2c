"""Loading a materialised model safely, and what its ``source.json`` says about it.

A model folder (``resources/models/{key}/model/``, built by ``contextuality.models.sources``) is a Hugging Face
folder or ELMo's options and weights. Loading recomputes every file's sha256 against ``source.json``,
never sets ``trust_remote_code``, and refuses pickle weights (``.bin``) unless allowed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from contextuality.core.digest import sha256_of

log = logging.getLogger(__name__)

ELMO_OPTIONS, ELMO_WEIGHTS = "options.json", "weights.hdf5"

SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class ModelError(RuntimeError):
    """A model cannot be materialised or loaded; the message says which model and what to do."""


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
        raise ModelError(
            f"model '{key}': {config_path} is not valid JSON; re-download or fix the model folder"
        ) from None
    model_type = hf_config.get("model_type")
    if hf_config.get("auto_map") and model_type not in CONFIG_MAPPING:
        raise ModelError(
            f"model '{key}': {hf_dir} defines its architecture ({model_type!r}) in Python files that would have to "
            "run (trust_remote_code), which this pipeline never allows; use a model whose architecture "
            "transformers ships"
        )


@dataclass(frozen=True)
class WeightsLoad:
    """What loading a model once in full tells the build: the weights' unused tensors, and the parameter count."""

    unused: list[str]  # a task head's tensors outside the base model, and stale extras the hidden states never use
    n_parameters: int  # the base model's parameters (tied or shared ones counted once)


def check_weights_load(key: str, hf_dir: Path, allow_pickle: bool, origin: str) -> WeightsLoad:
    """Load the model once, as the extraction jobs will, and refuse weights that do not fill its architecture.

    transformers initialises at random every parameter the weights lack or hold in another shape, and
    drops those it has no place for, noting it only in a log; each extraction job would then draw other
    random values. From its loading report: missing and mismatched parameters refuse. An unexpected
    tensor refuses when it belongs inside the base model to a module the architecture lacks (a block
    beyond config.json's layer count: config.json and the weights disagree). The others are returned
    (``unused``), to be recorded in ``source.json``: those of a task head outside the base model (BERT's
    ``cls.*``, an untied ``lm_head``) and stale extras of modules the model has (an old checkpoint's
    attention mask), which the hidden states never use; with the base model's parameter count.
    ``origin``: where the folder came from (the messages name it, not the folder being built).
    """
    from transformers import AutoModel

    for path in sorted(hf_dir.glob("*.safetensors")):
        check_safetensors_file(key, path, origin)
    try:
        model, info = AutoModel.from_pretrained(
            str(hf_dir),
            trust_remote_code=False,
            use_safetensors=not allow_pickle,
            dtype="auto",
            ignore_mismatched_sizes=True,
            output_loading_info=True,  # mismatches reported, refused below
        )
    except Exception as err:  # transformers' own errors have no common base: each becomes one line naming the model
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ModelError(f"model '{key}' ({origin}): transformers cannot load it ({type(err).__name__}: {reason}); "
                         "fix or replace the model's files") from None  # fmt: skip
    own, modules = {name for name, _ in model.named_children()}, {name for name, _ in model.named_modules()}
    prefix = f"{model.base_model_prefix}."
    inside, unused = [], []
    for name in sorted(info["unexpected_keys"]):
        path = name.removeprefix(prefix)
        lacking = path.split(".")[0] in own and path.rpartition(".")[0] not in modules
        (inside if lacking else unused).append(name)
    mismatched = [
        f"{name} {list(stored)} in the weights, {list(wanted)} in config.json"
        for name, stored, wanted in sorted(info["mismatched_keys"], key=lambda item: item[0])
    ]
    problems = [
        ("missing from the weights (transformers would initialise them at random)", sorted(info["missing_keys"])),
        ("of another shape", mismatched),
        ("in the weights for modules that the architecture in config.json lacks", inside),
    ]
    problems = [f"{len(names)} parameter(s) {what}: {_first(names)}" for what, names in problems if names]
    if problems:
        raise ModelError(
            f"model '{key}' ({origin}): its weights do not match the architecture ({type(model).__name__}) its "
            f"config.json describes: {'; '.join(problems)}; use a config.json that matches the weights, or another model"
        )
    return WeightsLoad(unused, sum(parameter.numel() for parameter in model.parameters()))


def check_safetensors_file(key: str, path: Path, origin: str) -> None:
    """Refuse a safetensors file whose header cannot be read (damaged or truncated), naming model and file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            handle.keys()
    except Exception as err:  # safetensors raises its own SafetensorError, or OSError
        raise ModelError(f"model '{key}' ({origin}): {path.name} is not a readable safetensors file ({err}); it is damaged "
                         "or truncated: replace it with an intact copy (download the model again)") from None  # fmt: skip


def _first(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


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


SNAKEMAKE_MARK = ".snakemake_timestamp"  # Snakemake's own mark in a folder output, written after the build


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file of a model folder (weights, config, tokenizer, any other), by path in the folder."""
    return {path.relative_to(folder).as_posix(): sha256_of(path)
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != SNAKEMAKE_MARK}  # fmt: skip


def verify_model_files(record: dict, model_dir: str | Path) -> None:
    """Refuse a model folder any of whose files changed, went missing or appeared since it was built.

    Every loader calls this first (the plan job's tokenizer, each extraction job's model, ELMo): the
    sha256 of every file, recorded in ``source.json`` (``files``) by the build, is recomputed.
    """
    folder = Path(model_dir)
    recover = f"delete {folder.parent} and rerun snakemake to rebuild the model"
    recorded = record.get("files")
    if not isinstance(recorded, dict):
        raise ModelError(f"model '{record['key']}': source.json records no digest of the model's files (built by an "
                         f"older version); {recover}")  # fmt: skip
    present = {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*"))
               if path.is_file() and path.name != SNAKEMAKE_MARK}  # fmt: skip
    for name in sorted(recorded.keys() | present.keys()):
        if name not in present:
            problem = "is missing"
        elif name not in recorded:
            problem = "was not there when the model was built (not in source.json)"
        elif sha256_of(present[name]) != recorded[name]:
            problem = f"changed since the model was built (its sha256 differs from {recorded[name]} in source.json)"
        else:
            continue
        raise ModelError(f"model '{record['key']}': {folder / name} {problem}; refusing to load it; {recover}")


def load_tokenizer(record: dict, model_dir: str | Path, max_length: int | None):
    """A model's fast tokenizer and its length limit (tokens, specials included), without loading the weights.

    The limit is the smallest of ``max_length`` (``models.{key}.max_length``; None: no limit of its own),
    the model's position limit and the tokenizer's own. Decoders without a pad token get one (padding is
    masked, any id will do).
    """
    verify_model_files(record, model_dir)
    return _tokenizer(record, Path(model_dir), max_length)


def _tokenizer(record: dict, hf_dir: Path, max_length: int | None):
    from transformers import AutoConfig, AutoTokenizer

    check_no_remote_code(record["key"], hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir), trust_remote_code=False)
    hf_config = AutoConfig.from_pretrained(str(hf_dir), trust_remote_code=False)
    return prepared_tokenizer(record["key"], tokenizer, hf_config, max_length, str(hf_dir))


def prepared_tokenizer(key: str, tokenizer, hf_config, max_length: int | None, where: str):
    """A fast tokenizer made ready for alignment (decoders without a pad token get one: padding is masked, any id
    will do) and its length limit (``load_tokenizer``); ``where`` names it in the refusal of a slow one."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(
            f"model '{key}': {where} has no fast (Rust) tokenizer, which alignment needs for character "
            "offsets; convert its tokenizer (tokenizer.json) or use another model"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
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


def load(
    record: dict, model_dir: str | Path, device: str, dtype: str, *, max_length: int | None, allow_pickle: bool
) -> LoadedModel:
    """Tokenizer and base model (hidden states only) from the folder ``model_dir``, in eval mode on ``device``.

    ``max_length`` and ``allow_pickle`` are the model's settings (``models.{key}.*``).
    """
    import torch
    from transformers import AutoModel

    verify_model_files(record, model_dir)
    hf_dir = str(model_dir)
    check_weights_format(record["key"], Path(hf_dir), allow_pickle)
    tokenizer, max_length = _tokenizer(record, Path(hf_dir), max_length)
    model = AutoModel.from_pretrained(
        hf_dir,
        trust_remote_code=False,
        use_safetensors=not allow_pickle,
        dtype=getattr(torch, dtype),
    )
    model.eval().to(device)
    n_layers = model.config.num_hidden_layers + 1
    return LoadedModel(record["key"], tokenizer, model, record, max_length, n_layers)
