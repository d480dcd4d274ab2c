# Configuration checks, the run's settings and what the rules share: thin calls of contextuality.workflow,
# where what they compute lives and is tested (run_files: targets and input functions; gpus: the GPU policy;
# rule_params: params and resources; prerun: the checks and lines before any job; terminal: the jobs' lines).
import copy
import os
from pathlib import Path

from contextuality.core import layout
from contextuality.core.runtime import prepend_python_path
from contextuality.core.settings import as_params, batch_params, stored_params
from contextuality.corpus.sources import is_sts
from contextuality.extraction.devices import DeviceError
from contextuality.paper import FIGURES
from contextuality.report.figure_files import FORMATS as FIGURE_FORMATS, MODEL_FIGURES
from contextuality.report.html import CATEGORIES
from contextuality.static.benchmark_files import benchmark_files
from contextuality.workflow.checks import checked_settings
from contextuality.workflow.estimates import machine_memory_bytes
from contextuality.workflow.gpus import gpu_policy
from contextuality.workflow.prerun import before_jobs, check_before_jobs, start_of_run
from contextuality.workflow.rule_params import JobResources, RuleParams
from contextuality.workflow.run_files import RunFiles, in_corpus, pair_files
from contextuality.workflow.schema import ConfigError
from contextuality.workflow.targets import command_kind, command_line_targets, record_run_config

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
CONFIGURED_CORPORA = "|".join(SETTINGS.corpora)
USAGES = layout.USAGES_CORPUS


wildcard_constraints:
    model="|".join(MODELS) if MODELS else "(?!)",
    corpus="|".join([*SETTINGS.corpora] + ([USAGES] if SETTINGS.senses.enabled else [])),
    shard=r"\d+",
    layer=r"\d+",


# The run's files (layer counts from the model's build, a checkpoint) and params.
FILES = RunFiles(SETTINGS, lambda model: checkpoints.materialise_model.get(model=model).output.record)
PARAMS = RuleParams(SETTINGS)


def final_outputs(wildcards):
    """Everything `snakemake` builds by default (contextuality.workflow.run_files.RunFiles.final)."""
    return FILES.final(rules)


# The GPUs the run may use and each job's (contextuality.workflow.gpus), then every check of the main process that
# can stop the run before any job, and a run's (or a dry run's) lines: the config against the default, the run's
# disk and time (contextuality.workflow.prerun).
COMMAND = command_kind() if workflow.is_main_process else None
try:
    GPUS = gpu_policy(workflow, SETTINGS)
    check_before_jobs(SETTINGS, GPUS, COMMAND, main_process=workflow.is_main_process)
    NEED = before_jobs(
        SETTINGS,
        GPUS,
        COMMAND,
        given_config=GIVEN_CONFIG,
        default_config=Path(workflow.basedir) / "config" / "config.yaml",
        configfiles=workflow.overwrite_configfiles,
        cores=workflow.resource_settings.cores,
        targets=command_line_targets(),
    )
except (ConfigError, DeviceError) as err:
    raise WorkflowError(str(err)) from None

# What each heavy job declares to the scheduler (contextuality.workflow.estimates; docs/scaling.md). A device job on
# torch's CPU backend declares at most metrics.device_memory_fraction of this machine's memory (on a cluster, whose
# nodes are not this machine, no cap); several at once stay within memory with --resources mem_mb=N.
JOBS = JobResources(SETTINGS, GPUS, None if GPUS.on_cluster else machine_memory_bytes())

# With targets named, their planned shards are checked before any job. A local run's jobs hand their lines for the
# terminal to this process, which shows them through Snakemake's logger: written to the terminal, the rich logger's
# progress display would erase them (contextuality.workflow.terminal).
TERMINAL = []


onstart:
    try:
        TERMINAL.extend(
            start_of_run(SETTINGS, NEED, COMMAND, GPUS, workflow.dag.needrun_jobs, command_line_targets())
        )
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


# A run that built something records its config, for `snakemake --report` given none (one that built nothing, or
# failed, is not "the last run": the report keeps the one that worked).
onsuccess:
    while TERMINAL:
        TERMINAL.pop().close()
    if COMMAND == "run":
        record_run_config(GIVEN_CONFIG, workflow.configfiles)


onerror:
    while TERMINAL:
        TERMINAL.pop().close()


def shown(path, name, item, caption=None):
    """``path`` as an item of the report: filed under the question it answers (``CATEGORIES[name]``), with its
    caption (a figure's, ``fig_{name}.rst``, unless given) and one label, ``item`` (wildcards allowed). One label:
    Snakemake's report turns a second label with two values, each on half of a category's items, into a toggle,
    and a category where one item lacks one of the values (a figure beside a table) renders a blank page
    (TypeError reading 'mime_type'). Figures are their pages (``report.figure_files.write_page``): the PNG shown,
    the PDF its download."""
    caption = caption or f"fig_{name}.rst"
    return report(path, caption=f"../report/{caption}", category=CATEGORIES[name], labels={"item": item})
