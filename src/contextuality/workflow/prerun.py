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
