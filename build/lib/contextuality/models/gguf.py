"""GGUF files (llama.cpp's format, as some packages ship their weights): dequantised once to safetensors."""

from __future__ import annotations

from pathlib import Path

from contextuality.models.loading import ModelError


def convert_gguf(gguf_path: Path, out_dir: Path, key: str | None = None) -> None:
    """Dequantise a GGUF once and save it as a safetensors HF folder (fast to reload).

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the dequantised weights are
    loaded into a fresh model built from the same config with the quantisation config removed.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    except (ValueError, KeyError, RuntimeError) as err:
        who = f"model '{key}': " if key else ""
        raise ModelError(
            f"{who}{gguf_path}: transformers cannot load this GGUF ({err}); only architectures transformers "
            "supports for GGUF (llama, mistral, qwen2, gemma3, gpt2, ...) can be used"
        ) from None
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
