"""The run's GPU policy: how many GPUs of this machine the run may use, and the `gpu` resource of each job kind.

The count is Snakemake's own `gpu` resource (--resources gpu=N, or a profile). Not given, it is the GPUs this
machine shows (``visible_gpus``), so the two commands of the README use a GPU where there is one; --resources gpu=0
keeps every job on the CPU. Extraction and device measurement jobs lease one of them each
(contextuality.extraction.devices); they read the count from the environment (``LOCAL_GPUS_ENV``), as they read
HDF5's locking setting. On a cluster (an executor with nodes) the scheduler gives each job its GPU and the count is
not this machine's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from contextuality.core.runtime import for_terminal
from contextuality.core.settings import Settings
from contextuality.extraction.devices import LOCAL_GPUS_ENV, gpu_line, visible_gpus


@dataclass(frozen=True)
class GpuPolicy:
    """The one place the GPU policy lives. ``local``: the run's `gpu` resource on this machine; ``given``: whether
    the user gave it; ``overwrite``: --set-resources' (or a profile's) resources by rule."""

    settings: Settings
    local: int = 0
    given: bool = False
    on_cluster: bool = False
    overwrite: dict = field(default_factory=dict)

    def given_gpus(self, rule: str, own: int) -> int:
        """The `gpu` resource of ``rule``'s jobs: what --set-resources or a profile sets for it, else ``own``."""
        given = self.overwrite.get(rule, {}).get("gpu")
        return own if given is None else getattr(given, "value", given)

    def per_shard(self, wildcards=None) -> int:
        """One GPU per shard job when extraction runs on CUDA, else none.

        `extraction.device: cuda` (or `cuda:N`) always asks for one; `auto` (the default) asks for one when the run
        has GPUs (`--resources gpu=N`, N >= 1), so a CPU machine needs nothing. On SLURM and Kubernetes the
        profile's `set-resources: extract: gpu: 1` asks the scheduler for one per shard job, and the job computes
        on the GPU it was given (contextuality.extraction.devices.choose_device).
        """
        device = self.settings.extraction.device
        return 1 if device.startswith("cuda") or (device == "auto" and self.local > 0) else 0

    def extract_job(self) -> int:
        """The `gpu` resource of an extraction job: what --set-resources or a profile sets for extract, else the
        rule's."""
        return self.given_gpus("extract", self.per_shard())

    def device_measure(self, wildcards=None) -> int:
        """One GPU per device measurement job when `metrics.device` is cuda, or auto with GPUs in the run."""
        device = self.settings.metrics.device.device
        return 1 if device == "cuda" or (device == "auto" and self.local > 0) else 0

    def measure_job(self) -> int:
        """The `gpu` resource of a device measurement job (``measure_model``), --set-resources' first."""
        return self.given_gpus("measure_model", self.device_measure())

    def device_senses(self, wildcards=None) -> int:
        """The sense job's GPU: as a device measurement job's on the device path (it runs the forward passes),
        else none."""
        return self.device_measure(wildcards) if self.settings.metrics.device.on_device else 0

    def senses_job(self) -> int:
        """The `gpu` resource of the sense job (``measure_senses``), --set-resources' first."""
        return self.given_gpus("measure_senses", self.device_senses())


def gpu_policy(workflow, settings: Settings, visible=visible_gpus) -> GpuPolicy:
    """The run's GPU policy from Snakemake's ``workflow``: its `gpu` resource, or (none given, not on a cluster) the
    GPUs this machine shows (``visible``), registered as the resource and told in one line by the main process.
    Sets ``LOCAL_GPUS_ENV`` for the jobs. A `DeviceError` from ``visible`` (a bad CUDA_VISIBLE_DEVICES) goes up."""
    on_cluster = workflow.global_resources["_nodes"].value is not None
    resource = workflow.global_resources.get("gpu")
    given = resource is not None and resource.value is not None
    if not given and not on_cluster:
        local = visible()
        workflow.register_resource("gpu", local)
        if workflow.is_main_process and local:
            print(for_terminal(gpu_line(local)), file=sys.stderr)
    else:
        local = (resource.value if resource is not None else 0) or 0
    os.environ[LOCAL_GPUS_ENV] = str(local)
    overwrite = workflow.resource_settings.overwrite_resources
    return GpuPolicy(settings, local=local, given=given, on_cluster=on_cluster, overwrite=overwrite)
