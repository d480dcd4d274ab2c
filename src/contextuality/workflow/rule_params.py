"""The rules' params and resources from the run's settings: what changes a job's output (its params, so that a
changed setting reruns exactly the jobs it changes) and what each heavy job declares to the scheduler
(``workflow.estimates``; docs/scaling.md)."""

from __future__ import annotations

import itertools

from contextuality.core.settings import Settings, as_params, stateful_batches
from contextuality.measure.device import parts as device_parts
from contextuality.models.sources import SOURCES
from contextuality.workflow import estimates, run_need


class RuleParams:
    """The params the rules share, from ``settings``."""

    def __init__(self, settings: Settings):
        self.settings = settings
        models = settings.models
        self.similarity = as_params(settings.similarity)  # every similarity table job's
        self.device_measure = device_parts.measure_params(settings.metrics.measure)  # measure_model's
        self.model_pairs = list(itertools.combinations(models, 2))
        # Reporting: display names and what each model stands for and is, in no job's params but the reporting
        # rules', so renaming a model re-draws the figures and tables only.
        self.model_labels = {key: model.label for key, model in models.items()}
        self.stands_for = {key: model.stands_for for key, model in models.items()}
        self.model_sources = {key: model_identity(model) for key, model in models.items()}

    def model(self, job):
        """Params function: the settings of the wildcards' model that ``job`` (a ModelSettings -> settings) picks."""
        return lambda wildcards: as_params(job(self.settings.models[wildcards.model]))

    def device_rows(self, wildcards) -> dict:
        """What changes the rows the device computes of the wildcards' model: the stored-vector settings but the
        number of shards."""
        return device_parts.rows_params(self.settings.shard(wildcards.model))

    def batches(self, wildcards):
        """A stateful model's batches (None for any other model)."""
        return stateful_batches(self.settings.models[wildcards.model])

    def device_senses(self) -> dict:
        """The device path's params of the sense job (none from the store, so a store run's jobs keep theirs): what
        changes the rows its forward passes make, as measure_model's (the stored-vector settings, a stateful model's
        batches)."""
        if not self.settings.metrics.device.on_device:
            return {}
        return {
            "on_device": lambda wildcards: {"shard": self.device_rows(wildcards), "batches": self.batches(wildcards)}
        }

    def device_combine(self) -> dict:
        """The device path's params of combine_layers (none on the store path, so its jobs keep theirs): the settings
        that change the rows, which each part's record must match."""
        return {"rows": self.device_rows} if self.settings.metrics.device.on_device else {}

    def similarity_pooling(self, wildcards) -> str:
        return self.settings.similarity.pooling_of(self.settings.models[wildcards.model])

    def similarity_sample(self, wildcards) -> dict:
        """What changes a model's similarity sample: its pooling and the sample's size."""
        return {"pooling": self.similarity_pooling(wildcards), "max_rows": self.settings.similarity.max_rows}

    def device_sample(self, wildcards) -> dict | None:
        """What changes the similarity sample a device job gathers (None when the stage is off)."""
        return self.similarity_sample(wildcards) if self.settings.similarity.enabled else None


def model_identity(model) -> dict:
    """A model's identity: its source and the config entries that name its downloaded weights (a hub id and its
    pinned revision, ELMo's files, ...); the reports call it the paper's own checkpoint only when these are the
    paper's."""
    source = SOURCES[model.source]
    named = {name: getattr(model.build.download, name) for name in source.required} if source.downloads else {}
    return {"source": model.source} | named


class JobResources:
    """Each heavy job's mem_mb and runtime, as Snakemake's resource functions (``wildcards, input, attempt``).

    ``gpus``: the run's ``GpuPolicy``; ``machine_bytes``: this machine's memory (None on a cluster, whose nodes are
    not this machine): a device job on torch's CPU backend declares at most metrics.device_memory_fraction of it."""

    def __init__(self, settings: Settings, gpus, machine_bytes: int | None):
        self.settings, self.gpus, self.machine_bytes = settings, gpus, machine_bytes

    def extraction_mem_mb(self, wildcards, input, attempt) -> int:
        model = self.settings.models[wildcards.model]  # any corpus: the plan's lengths in this shard
        return estimates.extraction_mem_mb(model, input.record, attempt, input.tokens, int(wildcards.shard))

    def extraction_runtime_min(self, wildcards, input, attempt) -> int:
        model = self.settings.models[wildcards.model]  # any corpus: the plan's sentence count
        return estimates.extraction_runtime_min(model, self.settings.corpus, input.record, attempt, input.tokens)

    def materialise_mem_mb(self, wildcards, attempt) -> int:
        return run_need.materialise_mem_mb(self.settings.models[wildcards.model], attempt)

    def materialise_runtime_min(self, wildcards, attempt) -> int:
        return run_need.materialise_runtime_min(self.settings.models[wildcards.model], attempt)

    def measure_mem_mb(self, wildcards, input, attempt) -> int:
        return estimates.measure_mem_mb(self.settings.metrics.measure, input.manifest, attempt)

    def whole_layer_mem_mb(self, wildcards, input, attempt) -> int:
        return estimates.whole_layer_mem_mb(input.manifest, attempt)

    def device_measure_mem_mb(self, wildcards, input, attempt) -> int:
        """The plan's lengths, as a shard job's; on torch's CPU backend every layer of the part at once."""
        settings = self.settings
        return estimates.device_measure_mem_mb(
            settings.models[wildcards.model], settings.metrics, input.record, attempt, input.tokens,
            units_path=input.units, storage_dtype=settings.extraction.storage_dtype, gpus=self.gpus.measure_job(),
            machine_bytes=self.machine_bytes,
        )  # fmt: skip

    def device_senses_mem_mb(self, wildcards, input, attempt) -> int:
        """Both corpora's plans; on torch's CPU backend every layer of both at once."""
        settings = self.settings
        return estimates.device_senses_mem_mb(
            settings.models[wildcards.model], settings.metrics, input.record, attempt,
            tokens_paths=[input.tokens, input.senses_tokens], units_paths=[input.units, input.senses_units],
            storage_dtype=settings.extraction.storage_dtype, gpus=self.gpus.senses_job(),
            machine_bytes=self.machine_bytes,
        )  # fmt: skip

    def senses_mem_mb(self, wildcards, input, attempt) -> int:
        """The sense job's: on the device path its forward passes' (``device_senses_mem_mb``), else one whole layer
        read from the store at a time (``whole_layer_mem_mb``)."""
        on_device = self.settings.metrics.device.on_device
        return (self.device_senses_mem_mb if on_device else self.whole_layer_mem_mb)(wildcards, input, attempt)

    def device_measure_runtime_min(self, wildcards, input, attempt) -> int:
        settings = self.settings
        return estimates.device_measure_runtime_min(
            settings.models[wildcards.model], settings.corpus, settings.metrics, input.record, attempt, input.tokens
        )

    def similarity_mem_mb(self, sample_paths, attempt) -> int:
        mapped = self.settings.similarity.max_rows is None  # a sample of every row is mapped, not held
        return estimates.similarity_mem_mb(sample_paths, self.settings.metrics.measure.memory_mb, attempt, mapped)
