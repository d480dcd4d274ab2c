"""What the docs say a setting needs, enforced by the jobs before any vector is computed: ``tokenization:
faithful`` only on a decoder (the plan job reads the built model's config.json, as the config cannot say
what a downloaded model is), and half precision only where the job computes on CUDA (the extraction job,
once its device is chosen: ``device: auto`` without a GPU is the CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import materialise
from contextuality.corpus.words import build_word_index
from contextuality.extraction.devices import DeviceError
from contextuality.extraction.extract import run_extraction_job
from contextuality.extraction.plan import run_plan_job
from contextuality.workflow.schema import load_settings

TEXTS = ["The dog runs home.", "A cat runs.", "The dog sleeps.", "The cat sleeps at home.", "Dogs run."]
TINY = {"source": "random", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 120}


def _planned_inputs(tmp_path: Path, architecture: str) -> tuple[dict, dict]:
    """A tiny random model of ``architecture`` built on a five-sentence corpus: (the run's paths, the model as the
    jobs take it: its key, record and folder)."""
    sentences = pd.DataFrame({"sentence_id": range(len(TEXTS)), "text": TEXTS})
    paths = {name: tmp_path / f"{name}.parquet" for name in ("sentences", "words", "index")}
    sentences.to_parquet(paths["sentences"])
    build_word_index(paths["sentences"], paths["words"], paths["index"], min_occurrences=2, count="occurrences")
    record = materialise(
        "m", {**TINY, "architecture": architecture}, tmp_path / "model", sentences_parquet=paths["sentences"], seed=1
    )
    (tmp_path / "source.json").write_text(json.dumps(record))
    return paths, {"model_key": "m", "record_path": tmp_path / "source.json", "model_dir": tmp_path / "model" / "model"}


def _plan(tmp_path: Path, settings, paths: dict, model: dict) -> dict:
    out = {
        name: tmp_path / "plan" / f"{name}.{ext}"
        for name, ext in [("tokens", "parquet"), ("units", "parquet"), ("occurrences", "parquet"), ("losses", "json")]
    }
    (tmp_path / "plan").mkdir(exist_ok=True)
    run_plan_job(
        settings=settings.plan("m"),
        **model,
        sentences_path=paths["sentences"],
        words_path=paths["words"],
        word_index_path=paths["index"],
        out_tokens=out["tokens"],
        out_units=out["units"],
        out_occurrences=out["occurrences"],
        out_losses=out["losses"],
    )
    return out


def test_faithful_tokenization_of_an_encoder_stops_the_plan_job_naming_the_key(tmp_path):
    """A BERT fed the paper's GPT-2 input ran without [CLS]/[SEP], most words read at another word's position."""
    paths, model = _planned_inputs(tmp_path, "bert")
    # the schema alone: the config check (contextuality.workflow.checks) refuses a random BERT before this
    settings = load_settings({"models": {"m": {**TINY, "architecture": "bert", "tokenization": "faithful"}}})
    with pytest.raises(ValueError) as raised:  # NotADecoderError, the plan job's expected error
        _plan(tmp_path, settings, paths, model)
    assert str(raised.value) == (
        "models.m.tokenization: 'faithful' rebuilds the paper's GPT-2 input, which only a decoder reads, but 'm' is "
        "a 'bert' model, not a decoder (no [CLS]/[SEP], word i read at position i); use tokenization: natural"
    )
    assert type(raised.value).__name__ == "NotADecoderError"
    assert not (tmp_path / "plan" / "tokens.parquet").exists()


@pytest.mark.parametrize(
    "model_type, decoder",
    [
        ("gpt2", True),
        ("llama", True),
        ("qwen2", True),
        ("bert", False),
        ("roberta", False),
        ("t5", False),
        ("electra", False),
        (None, False),
    ],
)
def test_decoders_are_the_model_types_with_a_causal_head_only(model_type, decoder):
    from contextuality.models.kind import is_decoder

    assert is_decoder(model_type) is decoder


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_on_a_job_computing_on_the_cpu_stops_before_loading(tmp_path, dtype):
    """``device: auto`` and no GPU given to the job: the job computes on the CPU, where float16 is not allowed."""
    paths, model = _planned_inputs(tmp_path, "gpt2")
    spec = {**TINY, "architecture": "gpt2"}
    settings = load_settings({"models": {"m": spec}, "extraction": {"device": "auto", "compute_dtype": dtype}})
    planned = _plan(tmp_path, settings, paths, model)
    with pytest.raises(DeviceError) as raised:
        run_extraction_job(
            corpus="sts",
            settings=settings.shard("m"),
            **model,
            tokens_path=planned["tokens"],
            units_path=planned["units"],
            shard=0,
            out_h5=tmp_path / "shard_0.h5",
            threads=1,
            disk_factor=1.0,
            gpus=0,
            seed=0,
        )
    assert str(raised.value) == (
        f"extraction.compute_dtype: {dtype} computes only on CUDA, but this extraction job computes on the CPU "
        "(extraction.device 'auto', and the job was given no GPU); run with --resources gpu=N (or a cluster profile "
        "that gives extract jobs gpu: 1), or set extraction.compute_dtype: float32"
    )
    assert not (tmp_path / "shard_0.h5").exists()
