# Configuration checks, the run's settings and the helpers every rule file uses.
import itertools
import os
from pathlib import Path

from snakemake.exceptions import IncompleteCheckpointException

from contextuality.core import layout
from contextuality.core.runtime import prepend_python_path
from contextuality.core.settings import as_params
from contextuality.corpus.sources import is_sts
from contextuality.corpus.sts import bundled_release_paths
from contextuality.extraction.devices import LOCAL_GPUS_ENV
from contextuality.models.sources import SOURCES
from contextuality.paper import FIGURES
from contextuality.static.benchmark_files import benchmark_files
from contextuality.workflow import estimates
from contextuality.workflow.checks import check_half_precision_has_a_gpu, checked_settings
from contextuality.workflow.schema import ConfigError
from contextuality.workflow.targets import command_line_targets


# Every setting, resolved once from the validated config (the rules' params are taken from it), after
# every check that can stop the run before any job: one line per problem, no traceback.
try:
    SETTINGS = checked_settings(config, configfiles=workflow.configfiles, targets=command_line_targets())
except ConfigError as err:
    raise WorkflowError(str(err)) from None

# What every job inherits (SLURM jobs too, with --export=ALL): HDF5's file locks fail on NFS/Lustre;
# and the contextuality package from src/, which the conda environments (envs/) do not install.
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
prepend_python_path(Path(workflow.basedir) / "src")

MODELS = list(SETTINGS.models)
MODEL_FIGURES = ["geometry", "rogue_dimensions"]


wildcard_constraints:
    model="|".join(MODELS) if MODELS else "(?!)",
    shard=r"\d+",
    layer=r"\d+",


def final_outputs(wildcards):
    """Everything `snakemake` builds by default: every file a job writes under results/ (an input function:
    layer counts may come from a checkpoint).

    Snakemake rebuilds a missing file only when something asks for it: a deleted output that no target names
    (a figure's PDF, claims.csv, a model's words.parquet) would pass unnoticed behind the files that are
    there. So every deliverable is a target, taken from the rules' own outputs; the stored vectors too, so a
    deleted shard or layer file is rebuilt (with what depends on it) instead of passing behind newer tables.
    """
    targets = [*rules.corpus.output, *rules.words.output, *rules.figures.output, *rules.summary.output]
    if is_sts(SETTINGS.corpus.source):  # pairs and gold scores are the STS corpus's only
        targets = [*rules.sts_pairs.output, *targets]
    if SETTINGS.static.enabled:
        targets += [*rules.table1.output]
        targets += filled(rules.static_baseline_scores.output, baseline=SETTINGS.static.baselines)
    if SETTINGS.senses.enabled:
        targets += [*rules.wordnet.output, *rules.sense_inventory.output, *rules.sense_usages.output,
                    *rules.context_diversity.output, *rules.tagger.output, *rules.sense_tags.output,
                    *rules.senses_figures.output]
    for model in MODELS:
        targets += model_outputs(model)
    return targets


def model_outputs(model):
    """Every file under results/ of one model: its plan, vectors, measurements, figures, scores and export."""
    per_model = [rules.plan, rules.manifest, rules.combine_layers, rules.model_figures]
    per_model += [rules.static_scores] if SETTINGS.static.enabled else []
    per_model += [rules.export_classic] if SETTINGS.extraction.export_classic else []
    per_model += [rules.senses_plan, rules.senses_manifest, rules.measure_senses] if SETTINGS.senses.enabled else []
    targets = [path for rule in per_model for path in filled(rule.output, model=[model])]
    layers = stored_layers(model)
    if layers is None:
        return targets
    shards, labels = range(SETTINGS.models[model].n_shards), [layout.layer_label(layer) for layer in layers]
    targets += filled(rules.extract.output, model=[model], shard=shards)
    targets += filled([*rules.layer_file.output, *rules.measure_layer.output], model=[model], layer=labels)
    if SETTINGS.senses.enabled:
        targets += filled(rules.senses_extract.output, model=[model], shard=shards)
        targets += filled(rules.senses_layer_file.output, model=[model], layer=labels)
    return targets


def filled(files, **values):
    """``files`` (a rule's declared outputs) with their wildcards filled in, for every combination of ``values``.

    Not ``expand``: with a default storage provider (--default-storage-provider) a rule's outputs carry their
    storage object, which expand refuses; ``apply_wildcards`` keeps it.
    """
    names = list(values)
    return [file.apply_wildcards(dict(zip(names, map(str, combination))))
            for combination in itertools.product(*values.values()) for file in files]


def model_params(job):
    """Params function: the settings of the wildcards' model that ``job`` (a ModelSettings -> settings) picks."""
    return lambda wildcards: as_params(job(SETTINGS.models[wildcards.model]))


def download_for_model(wildcards):
    """The download a model's build needs; a model built from its config alone (random) has none."""
    if SOURCES[SETTINGS.models[wildcards.model].source].downloads:
        return layout.path(layout.MODEL_DOWNLOAD, model=wildcards.model)
    return []


def needs_corpus_for_model(wildcards):
    return SOURCES[SETTINGS.models[wildcards.model].source].needs_corpus


def expand_shards(pattern):
    """Input function: ``pattern`` for every shard of the wildcards' model."""

    def shard_files(wildcards):
        model = SETTINGS.models[wildcards.model]
        return [layout.path(pattern, model=model.key, shard=shard) for shard in range(model.n_shards)]

    return shard_files


# The GPUs of this machine the run may use: Snakemake's own `gpu` resource (--resources gpu=N, or
# profiles/default). Extraction jobs lease one of them each (contextuality.extraction.devices); they read
# the count from the environment, as they read HDF5's locking setting.
LOCAL_GPUS = workflow.global_resources.get("gpu").value or 0
os.environ[LOCAL_GPUS_ENV] = str(LOCAL_GPUS)


def gpus_per_shard(wildcards):
    """One GPU per shard job when extraction runs on CUDA, else none: the one place the GPU policy lives.

    `extraction.device: cuda` (or `cuda:N`) always asks for one; `auto` (the default) asks for one when
    the run has GPUs (`--resources gpu=N`, N >= 1), so a CPU machine needs nothing. On SLURM and
    Kubernetes the profile's `set-resources: extract: gpu: 1` asks the scheduler for one per shard job,
    and the job computes on the GPU it was given (contextuality.extraction.devices.choose_device).
    """
    device = SETTINGS.extraction.device
    return 1 if device.startswith("cuda") or (device == "auto" and LOCAL_GPUS > 0) else 0


def extract_job_gpus():
    """The `gpu` resource of an extraction job: what --set-resources or a profile sets for extract, else the rule's."""
    given = workflow.resource_settings.overwrite_resources.get("extract", {}).get("gpu")
    return gpus_per_shard(None) if given is None else getattr(given, "value", given)


# Half precision where no extraction job can be given a GPU stops here, not in the first shard job.
if workflow.is_main_process:
    try:
        check_half_precision_has_a_gpu(SETTINGS, extract_job_gpus())
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


def n_layers_of(model):
    """Layers a model returns (input layer included): a random model's from its config, any other's from
    its source.json once built (the build is a checkpoint: the DAG's layer files follow from it)."""
    settings = SETTINGS.models[model]
    source = SOURCES[settings.source]
    record = layout.path(layout.MODEL_RECORD, model=model)
    if not source.layers_in_config:
        record = checkpoints.materialise_model.get(model=model).output.record
    return source.layer_count(settings.build, record)


def stored_layers(model):
    """The layers of a model, once its layer count is known, else None.

    Not yet known (a downloaded model not built): nothing is asked here, and the model is built and its
    layers extracted for its measurements; asking here would wait for each model's build in turn.
    """
    try:
        return range(n_layers_of(model))
    except IncompleteCheckpointException:
        return None


def every_layer(pattern):
    """Input function: ``pattern`` for every layer of the wildcards' model."""

    def files(wildcards):
        return [layout.path(pattern, model=wildcards.model, layer=layer) for layer in range(n_layers_of(wildcards.model))]

    return files


# What each heavy job declares to the scheduler (contextuality.workflow.estimates; docs/scaling.md).
def extraction_mem_mb(wildcards, input, attempt):
    return estimates.extraction_mem_mb(SETTINGS.models[wildcards.model], input.record, attempt)


def extraction_runtime_min(wildcards, input, attempt):
    return estimates.extraction_runtime_min(SETTINGS.models[wildcards.model], SETTINGS.corpus, input.record, attempt,
                                            input.tokens)  # any corpus: the plan's sentence count


def measure_mem_mb(wildcards, input, attempt):
    return estimates.measure_mem_mb(SETTINGS.metrics.measure, input.manifest, attempt)


def whole_layer_mem_mb(wildcards, input, attempt):
    return estimates.whole_layer_mem_mb(SETTINGS.metrics.measure, input.manifest, attempt)


# Reporting: display names and what each model stands for and is, in no job's params but the reporting
# rules', so renaming a model re-draws the figures and tables only.
MODEL_LABELS = {key: model.label for key, model in SETTINGS.models.items()}
STANDS_FOR = {key: model.stands_for for key, model in SETTINGS.models.items()}
# A model's identity: its source and the config entries that name its downloaded weights (a hub id and its pinned
# revision, ELMo's files, ...); the reports call it the paper's own checkpoint only when these are the paper's.
MODEL_SOURCES = {
    key: {"source": model.source}
    | {name: getattr(model.build.download, name) for name in SOURCES[model.source].required if SOURCES[model.source].downloads}
    for key, model in SETTINGS.models.items()
}
