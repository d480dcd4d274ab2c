"""A model's output layer (its prediction head), loaded from the materialised folder for the logit lens.

A decoder (GPT-2, Llama/SmolLM2) predicts the next token: ``kind="causal"``, its head is the final norm
and the unembedding (often tied to the input embeddings). A masked LM (BERT's ``cls.predictions``,
RoBERTa's ``lm_head``) predicts the token itself: ``kind="masked"``, its head is a transform
(dense, GELU, LayerNorm), the unembedding and a bias. A checkpoint without a head (MiniLM, a
``BertModel``) has no output layer, and a head that transformers would have to initialise at random is
refused: the reason says which parameters are missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextuality.models.kind import lm_kind
from contextuality.models.loading import (
    ModelError,
    _first,
    check_no_remote_code,
    check_weights_format,
    final_norm,
    verify_model_files,
)

log = logging.getLogger(__name__)

KINDS = ("causal", "masked")


@dataclass
class OutputHead:
    """The output layer of a model, as the lens needs it (arrays on the CPU, float32 unless asked otherwise).

    ``unembedding``: V×d rows of the output matrix; ``bias``: (V,) or None; ``input_embeddings``: V×d (the
    same array as ``unembedding`` when ``tied``), as stored: a model that scales them at its input (Gemma, by
    sqrt(d)) has layer 0 = the row times that scale, while its head uses the stored matrix; ``final_norm``: the pre-norm decoder's final norm (a torch
    module, None for a masked LM or a decoder without one); ``transform``: the masked LM's dense+GELU+LayerNorm
    (a torch module, None for a decoder). ``model_class``: the transformers class it was loaded with.
    A masked LM's head also keeps ``model`` (the loaded masked LM, for the passes with a word masked) and its
    tokenizer's ``mask_token_id`` (None where it has no mask token); a decoder's keeps neither.
    """

    kind: str
    tied: bool
    unembedding: np.ndarray
    bias: np.ndarray | None
    input_embeddings: np.ndarray
    final_norm: Callable | None = None
    transform: Callable | None = None
    model_class: str = ""
    model: object = None
    mask_token_id: int | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.unembedding.shape[0])

    @property
    def dim(self) -> int:
        return int(self.unembedding.shape[1])


def load_output_head(
    record: dict, model_dir: str | Path, *, dtype: str = "float32", allow_pickle: bool = False
) -> OutputHead | None:
    """The model's output head, or None when it has none that the checkpoint fills (the files verified first)."""
    head, reason = output_head_or_reason(record, model_dir, dtype=dtype, allow_pickle=allow_pickle)
    if head is None:
        log.info("model '%s': %s", record.get("key"), reason)
    return head


def output_head_or_reason(
    record: dict, model_dir: str | Path, *, dtype: str = "float32", allow_pickle: bool = False
) -> tuple[OutputHead | None, str]:
    """(head, "") or (None, why there is none): no prediction head, an incomplete one, or an unsupported kind.

    ``allow_pickle``: the model's setting (``models.{key}.allow_pickle``).
    Raises ModelError when the folder itself is not trusted (files changed, remote code, pickle weights).
    """
    verify_model_files(record, model_dir)
    folder, key = Path(model_dir), record["key"]
    check_weights_format(key, folder, allow_pickle)
    check_no_remote_code(key, folder)
    kind, reason = _head_kind(folder)
    if kind is None:
        return None, reason
    model, reason = _load_with_head(folder, kind, dtype, allow_pickle)
    if model is None:
        return None, reason
    head, reason = _head_of(model, kind)
    if head is not None and kind == "masked":
        from transformers import AutoTokenizer

        head.model = model
        head.mask_token_id = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False).mask_token_id
    return head, reason


def _head_kind(folder: Path) -> tuple[str | None, str]:
    """ "masked" for a model type transformers has a masked-LM class for, "causal" for a decoder-only one."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    model_type = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        return None, f"no output layer for the lens: {model_type} is an encoder-decoder model"
    kind = lm_kind(model_type)
    if kind is not None:
        return kind, ""
    return None, f"no output layer: transformers has no causal or masked LM class for model type {model_type!r}"


def _load_with_head(folder: Path, kind: str, dtype: str, allow_pickle: bool):
    """(model with its head, "") or (None, reason) when any parameter would be initialised at random."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if kind == "causal" else AutoModelForMaskedLM
    try:
        model, info = auto.from_pretrained(str(folder), trust_remote_code=False, use_safetensors=not allow_pickle,
                                           dtype=getattr(torch, dtype), output_loading_info=True)  # fmt: skip
    except Exception as err:  # transformers' errors have no common base (a shape mismatch raises here)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return (
            None,
            f"no output layer: transformers cannot load the model with a {kind} LM head ({type(err).__name__}: {first})",
        )
    missing = sorted(info["missing_keys"])
    mismatched = sorted(name for name, *_ in info.get("mismatched_keys", []))
    if not missing and not mismatched:
        return model.eval(), ""
    prefix = f"{model.base_model_prefix}."
    shared = {model.get_input_embeddings().weight.data_ptr()}
    head_params = [name for name, param in model.named_parameters(remove_duplicate=False)
                   if not name.startswith(prefix) and param.data_ptr() not in shared]  # fmt: skip
    head_names = {name for name in model.state_dict() if not name.startswith(prefix)}
    # nothing of the head in the weights (only the head missing): a base-model checkpoint such as MiniLM
    if not mismatched and set(head_params) <= set(missing) <= head_names:
        return None, "no output layer: the checkpoint has no prediction head"
    problems = [f"{len(names)} parameter(s) {what}: {_first(names)}"
                for what, names in (("missing from the weights", missing), ("of another shape", mismatched)) if names]  # fmt: skip
    return None, (f"no output layer: the {kind} LM head ({type(model).__name__}) would be initialised at random by "
                  f"transformers ({'; '.join(problems)})")  # fmt: skip


def _head_of(model, kind: str) -> tuple[OutputHead | None, str]:
    """The arrays and modules of a loaded model's head."""
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    if outputs is None:
        return None, f"no output layer: {type(model).__name__} exposes no output embeddings"
    tied = outputs.weight.data_ptr() == inputs.weight.data_ptr()
    unembedding = _array(outputs.weight)
    embeddings = unembedding if tied else _array(inputs.weight)
    bias = getattr(outputs, "bias", None)
    bias = None if bias is None else _array(bias)
    norm = transform = None
    if kind == "causal":
        base = model.base_model
        name = final_norm(base)
        norm = getattr(base, name) if name else None
    else:
        transform, reason = _masked_transform(model)
        if transform is None:
            return None, reason
    for module in (norm, transform):
        if module is not None:
            module.requires_grad_(False)
    return OutputHead(kind, tied, unembedding, bias, embeddings, norm, transform, type(model).__name__), ""


def _masked_transform(model):
    """The masked LM's transform before the unembedding: BERT's ``cls.predictions.transform``, RoBERTa's
    ``lm_head`` dense + GELU + layer_norm."""
    import torch

    predictions = getattr(getattr(model, "cls", None), "predictions", None)
    if predictions is not None and hasattr(predictions, "transform"):
        return predictions.transform, ""
    lm_head = getattr(model, "lm_head", None)
    if lm_head is not None and hasattr(lm_head, "dense") and hasattr(lm_head, "layer_norm"):
        return torch.nn.Sequential(lm_head.dense, torch.nn.GELU(), lm_head.layer_norm), ""
    return None, (
        f"no output layer for the lens: {type(model).__name__}'s head is neither BERT's cls.predictions "
        "nor RoBERTa's lm_head (dense, GELU, layer_norm)"
    )


def _array(tensor) -> np.ndarray:
    return tensor.detach().to("cpu").float().numpy()


__all__ = ["KINDS", "ModelError", "OutputHead", "load_output_head", "output_head_or_reason"]
