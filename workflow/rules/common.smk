# Configuration checks, the run's settings and the helpers every rule file uses.
import copy
import yaml
import itertools
import os
import sys
from types import SimpleNamespace
from pathlib import Path

from snakemake.exceptions import IncompleteCheckpointException

from contextuality.core import layout
from contextuality.core.runtime import TERMINAL_LINES_ENV, for_terminal, prepend_python_path
from contextuality.measure.device import parts as device_parts
from contextuality.core.settings import as_params, batch_params, stateful_batches, stored_params
from contextuality.corpus.sources import folder_files, is_sts
from contextuality.corpus.sts import bundled_release_paths
from contextuality.extraction.devices import LOCAL_GPUS_ENV, DeviceError, gpu_line, visible_gpus
from contextuality.models.sources import SOURCES
from contextuality.paper import FIGURES
from contextuality.report.figure_files import FORMATS as FIGURE_FORMATS, MODEL_FIGURES
from contextuality.report.html import CATEGORIES
from contextuality.static.benchmark_files import benchmark_files
from contextuality.workflow import estimates, run_need
from contextuality.core.diskspace import free_bytes
from contextuality.workflow.checks import check_half_precision_has_a_gpu, checked_settings, default_comparison_line
from contextuality.workflow.prerun import check_cpu_device_jobs_fit, check_device_has_a_gpu, check_local_model_files
from contextuality.workflow.schema import ConfigError
from contextuality.workflow.targets import command_kind, command_line_targets, record_run_config
from contextuality.workflow.terminal import TerminalRelay

# Every setting, resolved once from the validated config (the rules' params are taken from it), after
# every check that can stop the run before any job: one line per problem, no traceback.
GIVEN_CONFIG = copy.deepcopy(config)  # as given (files and --config), before the schema's defaults
try:
    SETTINGS = checked_settings(
        config,
        configfiles=workflow.configfiles,
        targets=command_line_targets(),
        overrides=workflow.config_settings.overwrite_config,
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None

# What every job inherits (SLURM jobs too, with --export=ALL): HDF5's file locks fail on NFS/Lustre;
# and the contextuality package from src/, which the conda environments (envs/) do not install.
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
prepend_python_path(Path(workflow.basedir) / "src")

MODELS = list(SETTINGS.models)
# The corpora: the study's (its figures, tables, Table 1 and senses), then the config's `corpora`; the rules of
# a corpus (sts_pairs, corpus, words) make the configured ones, the sense rules the WordNet usages' corpus.
MAIN_CORPUS = SETTINGS.corpus.name
CORPORA = list(SETTINGS.corpora)
CONFIGURED_CORPORA = "|".join(CORPORA)
USAGES = layout.USAGES_CORPUS


wildcard_constraints:
    model="|".join(MODELS) if MODELS else "(?!)",
    corpus="|".join(CORPORA + ([USAGES] if SETTINGS.senses.enabled else [])),
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
    targets = [*rules.figures.output, *rules.summary.output, *rules.report_pages.output]
    for name, corpus in SETTINGS.corpora.items():
        targets += filled(rules.corpus.output, corpus=[name]) + filled(rules.words.output, corpus=[name])
        if is_sts(corpus.source):  # the STS corpus's pairs and gold scores
            targets += filled(rules.sts_pairs.output, corpus=[name])
    if SETTINGS.static.enabled:
        targets += [*rules.table1.output]
        targets += filled(rules.static_baseline_scores.output, baseline=SETTINGS.static.baselines)
    if SETTINGS.senses.enabled:
        targets += [
            *rules.wordnet.output,
            *rules.sense_inventory.output,
            *rules.sense_usages.output,
            *rules.context_diversity.output,
            *rules.tagger.output,
            *rules.sense_tags.output,
            *rules.senses_figures.output,
        ]
    for model in MODELS:
        targets += model_outputs(model)
    return targets + (similarity_outputs() if SETTINGS.similarity.enabled else [])


def similarity_outputs():
    """The similarity stage's files of every measured corpus: its rows, each model's sample and tables, and one
    table per pair of models."""
    targets = []
    for corpus in CORPORA:
        targets += filled(rules.similarity_rows.output, corpus=[corpus])
        targets += filled(rules.similarity_sample.output, corpus=[corpus], model=MODELS)
        targets += filled(rules.similarity_model.output, corpus=[corpus], model=MODELS)
        targets += [layout.path(layout.SIMILARITY_PAIR, corpus=corpus, model_a=a, model_b=b) for a, b in MODEL_PAIRS]
    return targets + [*rules.similarity_figures.output, *rules.atlas.output]


def model_outputs(model):
    """Every file under results/ of one model: of each corpus its plan, vectors (when the run stores them) and
    measurements; of the study's corpus its figures, scores and sense measures; and the usages' plan and store."""
    targets = filled(rules.model_figures.output, model=[model])
    targets += filled(rules.model_pages.output, corpus=[MAIN_CORPUS], model=[model])
    targets += filled(rules.static_scores.output, model=[model]) if SETTINGS.static.enabled else []
    for corpus in CORPORA:
        targets += corpus_model_outputs(corpus, model, measured=True)
    if SETTINGS.senses.enabled:
        targets += filled(rules.measure_senses.output, corpus=[MAIN_CORPUS], model=[model])
        targets += corpus_model_outputs(USAGES, model, measured=False)
    return targets


def corpus_model_outputs(corpus, model, measured):
    """One model's files of one corpus: its plan and store (when the run stores them, or for the usages' corpus,
    which the sense measures read from the store unless they compute it on the device), and when ``measured`` its
    per-layer measures, tables and export."""
    stores = SETTINGS.stores or not (measured or SETTINGS.metrics.device.on_device)  # the usages' for the senses
    per_model = [rules.plan] + ([rules.manifest] if stores else [])
    per_model += [rules.combine_layers] if measured else []
    per_model += [rules.export_classic] if measured and SETTINGS.extraction.export_classic else []
    targets = [path for rule in per_model for path in filled(rule.output, corpus=[corpus], model=[model])]
    if measured and SETTINGS.metrics.device.on_device:
        parts = range(SETTINGS.metrics.device.device_parts)
        targets += filled(rules.measure_model.output, corpus=[corpus], model=[model], part=parts)
    layers = stored_layers(model)
    if layers is None:
        return targets
    shards, labels = range(SETTINGS.models[model].n_shards), [layout.layer_label(layer) for layer in layers]
    targets += filled(per_layer_rule().output, corpus=[corpus], model=[model], layer=labels) if measured else []
    if stores:
        targets += filled(rules.extract.output, corpus=[corpus], model=[model], shard=shards)
        targets += filled(rules.layer_file.output, corpus=[corpus], model=[model], layer=labels)
    return targets


def per_layer_rule():
    """Which of measure_layer and device_layer writes each layer's record, words and PC vectors."""
    return rules.device_layer if SETTINGS.metrics.device.on_device else rules.measure_layer


def filled(files, **values):
    """``files`` (a rule's declared outputs) with their wildcards filled in, for every combination of ``values``.

    Not ``expand``: with a default storage provider (--default-storage-provider) a rule's outputs carry their
    storage object, which expand refuses; ``apply_wildcards`` keeps it.
    """
    names = list(values)
    return [
        file.apply_wildcards(dict(zip(names, map(str, combination))))
        for combination in itertools.product(*values.values())
        for file in files
    ]


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


def expand_shards(pattern, corpus=None):
    """Input function: ``pattern`` for every shard of the wildcards' model, of the wildcards' corpus (or ``corpus``)."""

    def shard_files(wildcards):
        model, name = SETTINGS.models[wildcards.model], corpus or wildcards.corpus
        return [layout.path(pattern, corpus=name, model=model.key, shard=shard) for shard in range(model.n_shards)]

    return shard_files


def in_corpus(pattern, corpus):
    """``pattern`` of ``corpus``, its other wildcards left for the rule's (``{model}``)."""
    return pattern.replace("{corpus}", corpus)


def sts_release_inputs(wildcards):
    """Input function: the bundled release folder of the wildcards' corpus and each file sts_pairs reads in it."""
    corpus = SETTINGS.corpora[wildcards.corpus]
    files = bundled_release_paths(corpus.bundled_dir, corpus.years, corpus.include_2012_train)
    return {"release_dir": corpus.bundled_dir, "release_files": files}


def corpus_inputs(wildcards):
    """Input function: what the `corpus` job reads of the wildcards' corpus. A bundled STS corpus: its parsed
    pairs and (for the record's digests) the release files; any other: its file, or a dataset folder's files
    (each is read and digested, and editing one leaves the folder's time alone)."""
    corpus = SETTINGS.corpora[wildcards.corpus]
    inputs = {"pairs": [], "release_files": [], "corpus": [], "files": []}
    if corpus.source == "bundled":
        inputs["pairs"] = layout.path(layout.STS_PAIRS, corpus=corpus.name)
        inputs["release_files"] = sts_release_inputs(wildcards)["release_files"]
    elif not is_sts(corpus.source):
        inputs["corpus"] = corpus.path if corpus.path is not None else []
        inputs["files"] = dataset_folder_files(corpus)
    return inputs


# The GPUs of this machine the run may use: Snakemake's own `gpu` resource (--resources gpu=N, or a profile).
# Not given, it is the GPUs this machine shows (``visible_gpus``), so the two commands of the README use a GPU
# where there is one; --resources gpu=0 keeps every job on the CPU. Extraction and device measurement jobs lease
# one of them each (contextuality.extraction.devices); they read the count from the environment, as they read
# HDF5's locking setting.
# On a cluster (an executor with nodes) the scheduler gives each job its GPU and the count is not this machine's.
ON_A_CLUSTER = workflow.global_resources["_nodes"].value is not None
GIVEN_GPUS = workflow.global_resources.get("gpu")
if (GIVEN_GPUS is None or GIVEN_GPUS.value is None) and not ON_A_CLUSTER:
    try:
        LOCAL_GPUS = visible_gpus()
    except DeviceError as err:
        raise WorkflowError(str(err)) from None
    workflow.register_resource("gpu", LOCAL_GPUS)
    if workflow.is_main_process and LOCAL_GPUS:
        print(for_terminal(gpu_line(LOCAL_GPUS)), file=sys.stderr)
else:
    LOCAL_GPUS = (GIVEN_GPUS.value if GIVEN_GPUS is not None else 0) or 0
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
    return given_gpus("extract", gpus_per_shard(None))


def gpus_for_device_measure(wildcards):
    """One GPU per device measurement job when `metrics.device` is cuda, or auto with GPUs in the run."""
    device = SETTINGS.metrics.device.device
    return 1 if device == "cuda" or (device == "auto" and LOCAL_GPUS > 0) else 0


def given_gpus(rule, own):
    """The `gpu` resource of ``rule``'s jobs: what --set-resources or a profile sets for it, else ``own``."""
    given = workflow.resource_settings.overwrite_resources.get(rule, {}).get("gpu")
    return own if given is None else getattr(given, "value", given)


# Half precision where no extraction job can be given a GPU stops here, not in the first shard job; so does
# metrics.device: cuda on a machine (or run) with no GPU, not in every device job after the builds.
# A run (or a dry run) checks this machine and the local inputs too (prerun): not a report, lint or graph of it.
COMMAND = command_kind() if workflow.is_main_process else None
if workflow.is_main_process:
    try:
        if COMMAND in ("run", "dry-run") and not ON_A_CLUSTER:
            check_device_has_a_gpu(SETTINGS, LOCAL_GPUS, GIVEN_GPUS is not None and GIVEN_GPUS.value is not None)
            # a device job on torch's CPU backend that cannot hold one layer in this machine's memory
            measure_gpus = given_gpus("measure_model", gpus_for_device_measure(None))
            check_cpu_device_jobs_fit(SETTINGS, estimates.machine_memory_bytes(), measure_gpus)
        if COMMAND in ("run", "dry-run"):
            check_local_model_files(SETTINGS)  # a model folder or file that is not there, before its download job
        check_half_precision_has_a_gpu(
            SETTINGS, extract_job_gpus(), given_gpus("measure_model", gpus_for_device_measure(None))
        )
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


# Before any job of a run (or a dry run), one line each: whether the config leaves the default comparison, and
# what the whole run needs (its vectors' disk against the free space, its jobs and time); a run whose vectors
# cannot fit stops here, not at its first shard (contextuality.workflow.run_need.check_fits).
if COMMAND in ("run", "dry-run"):
    DEFAULT_CONFIG = Path(workflow.basedir) / "config" / "config.yaml"
    with open(DEFAULT_CONFIG) as handle:
        comparison = default_comparison_line(
            GIVEN_CONFIG, yaml.safe_load(handle), workflow.overwrite_configfiles, os.path.relpath(DEFAULT_CONFIG)
        )
    if comparison:
        print(for_terminal(comparison), file=sys.stderr)
    NEED = run_need.run_need(SETTINGS)
    FREE = free_bytes(Path(layout.RESULTS))
    NEED_LINE = run_need.estimate_line(SETTINGS, NEED, workflow.resource_settings.cores, FREE, LOCAL_GPUS)
    print(for_terminal(NEED_LINE), file=sys.stderr)
    if COMMAND == "run" and not command_line_targets():  # the whole run: a target may need a part of it
        try:
            run_need.check_fits(SETTINGS, NEED, FREE, layout.RESULTS)
        except ConfigError as err:
            raise WorkflowError(str(err)) from None
elif (
    COMMAND == "report"
    and MODELS
    and not Path(layout.path(layout.LAYERS_CSV, corpus=MAIN_CORPUS, model=MODELS[0])).is_file()
):
    raise WorkflowError(
        f"the report needs the run's results, and {layout.path(layout.LAYERS_CSV, corpus=MAIN_CORPUS, model=MODELS[0])} "
        "is not there: pass the run's config (snakemake --report --configfile <its files>), or run it first"
    )


# Targets named (`snakemake all`, `snakemake store`, a file): the whole-run check above is skipped (a target may need
# a part of the run), and the shards that the targets' jobs write are checked once they are planned, before any job.
# A local run's jobs then hand their lines for the terminal to this process, which shows them through Snakemake's
# logger: written to the terminal, the rich logger's progress display would erase them (contextuality.workflow.terminal).
TERMINAL = {}


onstart:
    if COMMAND == "run" and command_line_targets():
        try:
            free = free_bytes(Path(layout.RESULTS))
            planned = [(job.rule.name, dict(job.wildcards_dict)) for job in workflow.dag.needrun_jobs()]
            run_need.check_planned_fits(SETTINGS, NEED, planned, free, layout.RESULTS, command_line_targets())
        except ConfigError as err:
            raise WorkflowError(str(err)) from None
    if COMMAND == "run" and not ON_A_CLUSTER:
        from snakemake.logging import logger as snakemake_logger

        path = Path(".snakemake") / f"terminal-lines-{os.getpid()}.txt"
        TERMINAL["relay"] = TerminalRelay(path, snakemake_logger.info).start()
        os.environ[TERMINAL_LINES_ENV] = str(TERMINAL["relay"].path)


# A run that built something records its config, for `snakemake --report` given none (one that built nothing, or
# failed, is not "the last run": the report keeps the one that worked).
onsuccess:
    if "relay" in TERMINAL:
        TERMINAL.pop("relay").close()
    if COMMAND == "run":
        record_run_config(GIVEN_CONFIG, workflow.configfiles)


onerror:
    if "relay" in TERMINAL:
        TERMINAL.pop("relay").close()


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


def store_files(wildcards):
    """Input function: every model's store (`snakemake store`): shards, manifest and layer files."""
    files = []
    for corpus, model in itertools.product(CORPORA, MODELS):
        wildcards = SimpleNamespace(corpus=corpus, model=model)
        files += expand_shards(layout.SHARD)(wildcards)
        files += [layout.path(layout.MANIFEST, corpus=corpus, model=model)]
        files += every_layer(layout.LAYER_FILE)(wildcards)
    return files


def every_layer(pattern, corpus=None):
    """Input function: ``pattern`` for every layer of the wildcards' model, of the wildcards' corpus (or ``corpus``)."""

    def files(wildcards):
        name = corpus or getattr(wildcards, "corpus", None)
        return [
            layout.path(pattern, corpus=name, model=wildcards.model, layer=layer)
            for layer in range(n_layers_of(wildcards.model))
        ]

    return files


# What each heavy job declares to the scheduler (contextuality.workflow.estimates; docs/scaling.md). A device job on
# torch's CPU backend declares at most metrics.device_memory_fraction of this machine's memory (on a cluster, whose
# nodes are not this machine, no cap); several at once stay within memory with --resources mem_mb=N.
MACHINE_BYTES = None if ON_A_CLUSTER else estimates.machine_memory_bytes()


def dataset_folder_files(corpus):
    """Every file of a local `datasets` corpus folder as it is now ([] for other sources, or a folder a rule makes)."""
    if corpus.source != "datasets" or corpus.path is None or not Path(corpus.path).is_dir():
        return []
    return [str(path) for path in folder_files(corpus.path)]


def extraction_mem_mb(wildcards, input, attempt):
    return estimates.extraction_mem_mb(
        SETTINGS.models[wildcards.model], input.record, attempt, input.tokens, int(wildcards.shard)
    )  # any corpus: the plan's lengths in this shard


def extraction_runtime_min(wildcards, input, attempt):
    return estimates.extraction_runtime_min(
        SETTINGS.models[wildcards.model], SETTINGS.corpus, input.record, attempt, input.tokens
    )  # any corpus: the plan's sentence count


def measure_mem_mb(wildcards, input, attempt):
    return estimates.measure_mem_mb(SETTINGS.metrics.measure, input.manifest, attempt)


def whole_layer_mem_mb(wildcards, input, attempt):
    return estimates.whole_layer_mem_mb(input.manifest, attempt)


def device_measure_mem_mb(wildcards, input, attempt):
    return estimates.device_measure_mem_mb(
        SETTINGS.models[wildcards.model],
        SETTINGS.metrics,
        input.record,
        attempt,
        input.tokens,
        units_path=input.units,
        storage_dtype=SETTINGS.extraction.storage_dtype,
        gpus=given_gpus("measure_model", gpus_for_device_measure(wildcards)),
        machine_bytes=MACHINE_BYTES,
    )  # the plan's lengths, as a shard job's; on torch's CPU backend every layer of the part at once


def device_senses_mem_mb(wildcards, input, attempt):
    return estimates.device_senses_mem_mb(
        SETTINGS.models[wildcards.model],
        SETTINGS.metrics,
        input.record,
        attempt,
        tokens_paths=[input.tokens, input.senses_tokens],
        units_paths=[input.units, input.senses_units],
        storage_dtype=SETTINGS.extraction.storage_dtype,
        gpus=given_gpus("measure_senses", gpus_for_device_senses(wildcards)),
        machine_bytes=MACHINE_BYTES,
    )  # both corpora's plans; on torch's CPU backend every layer of both at once


def gpus_for_device_senses(wildcards):
    """The sense job's GPU: as a device measurement job's on the device path (it runs the forward passes), else none."""
    return gpus_for_device_measure(wildcards) if SETTINGS.metrics.device.on_device else 0


def store_sense_inputs():
    """The sense job's store inputs: every layer file, shard and manifest of both corpora (none on the device path,
    whose job computes the layers)."""
    if SETTINGS.metrics.device.on_device:
        return {}
    return {
        "layers": every_layer(layout.LAYER_FILE),
        "shards": expand_shards(layout.SHARD),
        "manifest": layout.MANIFEST,
        "senses_layers": every_layer(layout.LAYER_FILE, corpus=USAGES),
        "senses_shards": expand_shards(layout.SHARD, corpus=USAGES),
        "senses_manifest": in_corpus(layout.MANIFEST, USAGES),
    }


def usage_source_inputs():
    """The sense usages' corpus files when they come from a sense-tagged corpus (senses.usages.source: wsd_xml):
    its XML and gold key; none for WordNet's examples (so a default run's job keeps its inputs)."""
    usages = SETTINGS.sense_usages
    if usages["source"] != "wsd_xml":
        return {}
    return {"wsd_xml": usages["xml"], "wsd_gold_key": usages["gold_key"]}


def device_sense_params():
    """The device path's params of the sense job (none from the store, so a store run's jobs keep theirs): what
    changes the rows its forward passes make, as measure_model's (the stored-vector settings, a stateful model's
    batches)."""
    if not SETTINGS.metrics.device.on_device:
        return {}
    return {
        "on_device": lambda wildcards: {
            "shard": device_parts.rows_params(SETTINGS.shard(wildcards.model)),
            "batches": stateful_batches(SETTINGS.models[wildcards.model]),
        }
    }


def device_measure_runtime_min(wildcards, input, attempt):
    return estimates.device_measure_runtime_min(
        SETTINGS.models[wildcards.model], SETTINGS.corpus, SETTINGS.metrics, input.record, attempt, input.tokens
    )


def device_part_of_layer(wildcards):
    """Input function: the device part's tar that holds the wildcards' layer (parts are consecutive layers)."""
    layers, parts = n_layers_of(wildcards.model), SETTINGS.metrics.device.device_parts
    layer = int(wildcards.layer)
    part = next(p for p in range(parts) if p * layers // parts <= layer < (p + 1) * layers // parts)
    return layout.path(layout.DEVICE_PART, corpus=wildcards.corpus, model=wildcards.model, part=part)


def device_made_from(wildcards):
    """Input function: on the device path, what the run's rows are made from (source.json and the plan's files),
    which each part's record must match; none on the store path (its manifest is checked against them)."""
    if not SETTINGS.metrics.device.on_device:
        return []
    files = (layout.MODEL_RECORD, layout.TOKENS, layout.UNITS)
    return [layout.path(pattern, corpus=wildcards.corpus, model=wildcards.model) for pattern in files]


def device_combine_params():
    """The device path's params of combine_layers (none on the store path, so its jobs keep theirs): the settings
    that change the rows, which each part's record must match."""
    if not SETTINGS.metrics.device.on_device:
        return {}
    return {"rows": lambda wildcards: device_parts.rows_params(SETTINGS.shard(wildcards.model))}


def measured_on(wildcards):
    """Input function: what a model's layers were measured on: its manifest, or every device part's record."""
    if SETTINGS.metrics.device.on_device:
        parts = range(SETTINGS.metrics.device.device_parts)
        return [
            layout.path(layout.DEVICE_RECORD, corpus=wildcards.corpus, model=wildcards.model, part=part)
            for part in parts
        ]
    return [layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model)]


# The similarity stage (similarity.smk): its settings as every table job's params, the pairs of models (by key)
SIMILARITY_PARAMS = as_params(SETTINGS.similarity)
MODEL_PAIRS = list(itertools.combinations(MODELS, 2))


def similarity_sample_inputs(wildcards):
    """Input function: what a model's similarity sample is gathered from: the device parts' samples (metrics.on_device),
    else every layer file of the store with its shards and manifest."""
    if SETTINGS.metrics.device.on_device:
        parts = range(SETTINGS.metrics.device.device_parts)
        return {"parts": [layout.path(layout.DEVICE_SAMPLE, corpus=wildcards.corpus, model=wildcards.model, part=part)
                          for part in parts]}  # fmt: skip
    return {
        "layers": every_layer(layout.LAYER_FILE)(wildcards),
        "shards": expand_shards(layout.SHARD)(wildcards),
        "manifest": layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model),
    }


def similarity_pooling(wildcards):
    return SETTINGS.similarity.pooling_of(SETTINGS.models[wildcards.model])


def similarity_sample_params(wildcards):
    """What changes a model's similarity sample: its pooling and the sample's size."""
    return {"pooling": similarity_pooling(wildcards), "max_rows": SETTINGS.similarity.max_rows}


def pair_files(pattern, wildcards):
    """``pattern`` of the wildcards' corpus for model_a, then model_b."""
    return [
        layout.path(pattern, corpus=wildcards.corpus, model=model) for model in (wildcards.model_a, wildcards.model_b)
    ]


def similarity_mem_mb(sample_paths, attempt):
    mapped = SETTINGS.similarity.max_rows is None  # a sample of every row is mapped, not held
    return estimates.similarity_mem_mb(sample_paths, SETTINGS.metrics.measure.memory_mb, attempt, mapped)


def store_manifest_beside_device(wildcards):
    """Input function: the manifest, when the layers were measured on the device and the run stores them too
    (the combining step checks that the two were made from the same)."""
    if SETTINGS.metrics.device.on_device and SETTINGS.stores:
        return layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model)
    return []


# Reporting: display names and what each model stands for and is, in no job's params but the reporting
# rules', so renaming a model re-draws the figures and tables only.
MODEL_LABELS = {key: model.label for key, model in SETTINGS.models.items()}


def shown(path, name, item, caption=None):
    """``path`` as an item of the report: filed under the question it answers (``CATEGORIES[name]``), with its
    caption (a figure's, ``fig_{name}.rst``, unless given) and one label, ``item`` (wildcards allowed). One label:
    Snakemake's report turns a second label with two values, each on half of a category's items, into a toggle,
    and a category where one item lacks one of the values (a figure beside a table) renders a blank page
    (TypeError reading 'mime_type'). Figures are their pages (``report.figure_files.write_page``): the PNG shown,
    the PDF its download."""
    caption = caption or f"fig_{name}.rst"
    return report(path, caption=f"../report/{caption}", category=CATEGORIES[name], labels={"item": item})


STANDS_FOR = {key: model.stands_for for key, model in SETTINGS.models.items()}
# A model's identity: its source and the config entries that name its downloaded weights (a hub id and its pinned
# revision, ELMo's files, ...); the reports call it the paper's own checkpoint only when these are the paper's.
MODEL_SOURCES = {
    key: {"source": model.source}
    | {
        name: getattr(model.build.download, name)
        for name in SOURCES[model.source].required
        if SOURCES[model.source].downloads
    }
    for key, model in SETTINGS.models.items()
}
