"""models/heads: a model's output layer loaded for the lens, or None with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from contextuality.models.heads import load_output_head, output_head_or_reason
from contextuality.models.loading import ModelError, check_weights_load, file_digests
from contextuality.models.randommodels import build_random_model

TEXTS = ["the bank of the river is green .", "she went to the bank to get money .",
         "a cat sat on the mat .", "the river runs past the old mill ."] * 3  # fmt: skip


def built(folder: Path, architecture: str, head: str | None = None) -> tuple[dict, Path]:
    """A tiny random model and the record the pipeline's build writes (``files``: every file's digest)."""
    build_random_model(
        architecture, TEXTS, folder, seed=3, n_hidden_layers=2, hidden_size=16, vocab_size=120, head=head
    )
    return {"key": f"tiny-{architecture}", "files": file_digests(folder)}, folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    return {name: built(root / name, arch, head) for name, arch, head in
            (("bert", "bert", None), ("bert-mlm", "bert", "masked-lm"), ("gpt2", "gpt2", None))}  # fmt: skip


def test_decoder_head_is_causal_and_tied(models):
    head, reason = output_head_or_reason(*models["gpt2"])
    assert reason == "" and head.kind == "causal" and head.tied and head.bias is None
    assert head.unembedding is head.input_embeddings and head.unembedding.dtype == np.float32
    assert head.final_norm is not None and head.transform is None  # GPT-2's ln_f


def test_masked_lm_head(models):
    head = load_output_head(*models["bert-mlm"])
    assert head.kind == "masked" and head.tied and head.bias.shape == (head.vocab_size,)
    assert head.transform is not None and head.final_norm is None


def test_base_model_has_no_output_layer(models):
    head, reason = output_head_or_reason(*models["bert"])
    assert head is None and reason == "no output layer: the checkpoint has no prediction head"
    assert load_output_head(*models["bert"]) is None


def test_head_missing_a_parameter_is_refused(models, tmp_path):
    from safetensors.torch import load_file, save_file

    record, folder = models["bert-mlm"]
    copy = tmp_path / "model"
    copy.mkdir()
    for path in folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    tensors = load_file(copy / "model.safetensors")
    del tensors["cls.predictions.transform.dense.weight"]
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    head, reason = output_head_or_reason({"key": "cut", "files": file_digests(copy)}, copy)
    assert head is None and "would be initialised at random" in reason
    assert "cls.predictions.transform.dense.weight" in reason


def test_changed_files_refused_before_loading(models):
    record, folder = models["gpt2"]
    with pytest.raises(ModelError, match="changed since the model was built"):
        load_output_head({**record, "files": {**record["files"], "config.json": "0" * 64}}, folder)


def test_random_bert_head_keeps_base_weights(models):
    """The masked-LM head leaves the base tensors of the same seed byte-identical, and AutoModel loads it whole."""
    from safetensors.torch import load_file

    base = load_file(models["bert"][1] / "model.safetensors")
    with_head = load_file(models["bert-mlm"][1] / "model.safetensors")
    assert all(np.array_equal(base[name].numpy(), with_head[f"bert.{name}"].numpy()) for name in base)
    assert {name for name in with_head if not name.startswith("bert.")} >= {"cls.predictions.bias"}
    loaded = check_weights_load("tiny-bert", models["bert-mlm"][1], False, "test")
    assert loaded.unused and all(name.startswith("cls.") for name in loaded.unused)
    assert loaded.n_parameters == sum(tensor.numel() for tensor in base.values())  # the base model's, head left out
    assert json.loads((models["bert-mlm"][1] / "config.json").read_text())["architectures"] == ["BertForPreTraining"]


def test_head_option_only_for_bert(tmp_path):
    with pytest.raises(ValueError, match="only head='masked-lm' with architecture 'bert'"):
        build_random_model("gpt2", TEXTS, tmp_path / "m", seed=3, n_hidden_layers=1, hidden_size=16,
                           vocab_size=120, head="masked-lm")  # fmt: skip


def test_gemma3s_head_is_its_tied_embedding_after_its_final_norm_and_the_lens_gives_its_logits(tmp_path):
    """Gemma-3 (the atlas's decoder): its base model's final norm is ``norm`` (Gemma3RMSNorm), its head the input
    embedding, tied. It multiplies its input embeddings by sqrt(hidden) (layer 0 is scaled), but its head uses the
    stored matrix: the lens at the last layer gives the model's own logits."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from contextuality.models.loading import final_norm
    from contextuality.senses.output import lens

    config = Gemma3TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=8)  # fmt: skip
    torch.manual_seed(0)
    Gemma3ForCausalLM(config).eval().save_pretrained(tmp_path)
    head, reason = output_head_or_reason({"key": "tiny-gemma", "files": file_digests(tmp_path)}, tmp_path)
    assert reason == "" and head.kind == "causal" and head.tied and head.bias is None
    assert type(head.final_norm).__name__ == "Gemma3RMSNorm"
    model = Gemma3ForCausalLM.from_pretrained(tmp_path).eval()
    assert final_norm(model.model) == "norm"
    ids = torch.tensor([[2, 10, 11, 12, 13]])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    hidden = [h[0].numpy() for h in out.hidden_states]
    np.testing.assert_allclose(hidden[0], head.input_embeddings[ids[0].numpy()] * 16**0.5, rtol=1e-5, atol=1e-6)
    logits = np.concatenate([z for _, z in lens._batches(head, hidden[-1], True, 64)])
    np.testing.assert_allclose(logits, out.logits[0].numpy(), rtol=1e-5, atol=1e-5)
