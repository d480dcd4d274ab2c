"""Which kind of language model a model type is (``config.json``'s ``model_type``): the one home of "is this
model a decoder", for the faithful tokenization, the output head and the sense measures.

A decoder has a causal-LM head and no masked-LM one (GPT-2, Llama, Qwen2). An encoder has a masked-LM head
(BERT and RoBERTa have a causal one too, for encoder-decoder use), or neither (T5). transformers is imported
only when asked: the Snakefile's checks import this module at every start.
"""

from __future__ import annotations

import json
from pathlib import Path


def lm_kind(model_type: str | None) -> str | None:
    """ "masked" for a model type transformers has a masked-LM class for, "causal" for a decoder-only one,
    None for neither."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    # BERT-type encoders also have a causal class (BertLMHeadModel); their head predicts the token itself
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked"
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    return None


def is_decoder(model_type: str | None) -> bool:
    """Whether transformers builds ``model_type`` only as a left-to-right model."""
    return lm_kind(model_type) == "causal"


def model_type_of(model_dir: str | Path) -> str | None:
    """A model folder's ``config.json`` model type, or None for a model without one (ELMo: a bidirectional LSTM,
    no decoder)."""
    config = Path(model_dir) / "config.json"
    return json.loads(config.read_text()).get("model_type") if config.is_file() else None
