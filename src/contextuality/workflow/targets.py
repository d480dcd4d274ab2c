"""Requested targets, checked before any job like the config: a model that is not configured, a layer out
of range, a static baseline that is not listed, each stop the run in one line."""

from __future__ import annotations

from pathlib import Path

from contextuality.core import layout
from contextuality.core.settings import Settings
from contextuality.models.sources import SOURCES
from contextuality.workflow.schema import ConfigError


def command_line_args(argv: list[str] | None = None):
    """This ``snakemake`` command's arguments, as Snakemake's own argument parser reads them; None for a job
    Snakemake spawns itself (``--target-jobs``), a process that is not the snakemake CLI, or a bad command line
    (Snakemake itself reports it)."""
    import sys

    argv = sys.argv if argv is None else argv
    program = Path(argv[0]) if argv else Path()
    if not (program.name.startswith("snakemake") or program.parent.name == "snakemake"):  # `python -m snakemake`
        return None
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(argv[1:])
    except SystemExit:
        return None
    return None if args.target_jobs else args


def command_line_targets(argv: list[str] | None = None) -> list[str]:
    """The targets of this ``snakemake`` command, as Snakemake's own argument parser reads them.

    Snakemake hands its parsed targets to the workflow only after the Snakefile is parsed (its DAG
    settings are set after the include), so the target check, which must run before any job, asks
    Snakemake's parser instead of matching words by hand. [] for a job Snakemake spawns itself
    (``--target-jobs``: planned from checked targets) or a process that is not the snakemake CLI.
    """
    args = command_line_args(argv)
    return [] if args is None else [str(target) for target in args.targets]


# Commands that build nothing: no estimate, no disk check (each is an option of Snakemake's command line).
_NOT_A_RUN = (
    "lint",
    "generate_unit_tests",
    "containerize",
    "export_cwl",
    "list_rules",
    "list_target_rules",
    "dag",
    "rulegraph",
    "filegraph",
    "d3dag",
    "summary",
    "detailed_summary",
    "archive",
    "cleanup_metadata",
    "cleanup_shadow",
    "unlock",
    "list_changes",
    "list_input_changes",
    "list_params_changes",
    "list_untracked",
    "delete_all_output",
    "delete_temp_output",
    "touch",
    "print_compilation",
    "conda_create_envs_only",
)


def command_kind(argv: list[str] | None = None) -> str | None:
    """ "run", "dry-run" or "report" for such a ``snakemake`` command; None for anything else (another command,
    a spawned job, not the snakemake CLI)."""
    args = command_line_args(argv)
    if args is None:
        return None
    if getattr(args, "report", None):
        return "report"
    if any(getattr(args, option, None) for option in _NOT_A_RUN):
        return None
    return "dry-run" if args.dryrun else "run"


# The config of the last run that built something here (its files and --config merged, before the schema's
# defaults), so that `snakemake --report` without them reports that run instead of the default study's; and each
# such run's config by its digest (RUNS), which the report's line names.
RUN_CONFIG = ".snakemake/contextuality/run_config.yaml"  # Snakemake's own folder: no rule's output, no job's log
RUNS = ".snakemake/contextuality/runs"
_SHOWN_RUNS = 5


def report_config(argv: list[str] | None = None) -> str | None:
    """The config a ``--report`` command given no --configfile reads: the last run's (RUN_CONFIG), told in one
    line naming the other runs recorded here; None when there is none, or for any other command."""
    import sys

    args = command_line_args(argv)
    if command_kind(argv) != "report" or args.configfile or not Path(RUN_CONFIG).is_file():
        return None
    print(f"contextuality: the report is of the last run here that built something, whose config is {RUN_CONFIG}"
          f"{_from_files(Path(RUN_CONFIG))}; --configfile names another{_runs_line()}", file=sys.stderr)  # fmt: skip
    return RUN_CONFIG


def _from_files(path: Path) -> str:
    """`` (from FILES, DATE)`` as the record's first line says it."""
    try:
        first = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""
    return f" ({first.split('# run of ', 1)[1]})" if first.startswith("# run of ") else ""


def _runs_line() -> str:
    runs = sorted(Path(RUNS).glob("*.yaml"), key=lambda path: path.stat().st_mtime, reverse=True)
    if not runs:
        return ""
    shown = ", ".join(f"{path}{_from_files(path)}" for path in runs[:_SHOWN_RUNS])
    more = f", and {len(runs) - _SHOWN_RUNS} more in {RUNS}" if len(runs) > _SHOWN_RUNS else ""
    return f": the runs recorded here, latest first, are {shown}{more}"


def record_run_config(config: dict, configfiles=()) -> None:
    """Write the config of a run that built something (as given, before the schema's defaults; ``configfiles``:
    the files it was read from) to RUN_CONFIG, for ``report_config``, and to RUNS by its digest. Called when the
    run has succeeded with jobs run (the Snakefile's onsuccess): a run that built nothing, or failed, is not one."""
    import hashlib
    import time

    import yaml

    from contextuality.core.atomic import atomic_path

    body = yaml.safe_dump(config, sort_keys=False)
    files = " ".join(str(path) for path in configfiles) or "no --configfile"
    header = (f"# run of {files}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n# The config of a run here that "
              "built something (contextuality.workflow.targets): `snakemake --report` reads the last one when given no "
              "--configfile\n")  # fmt: skip
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    for path in (Path(RUNS) / f"{digest}.yaml", Path(RUN_CONFIG)):
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as partial:  # the project's one way to write: a temporary name, then rename
            Path(partial).write_text(header + body)


def layer_count(settings: Settings, key: str) -> int | None:
    """Layers model ``key`` returns (input layer included) when known before extraction, else None.

    A random model's count is in its config; any other model's is in its ``source.json``, so it is
    known once the model is built.
    """
    model = settings.models[key]
    return SOURCES[model.source].layer_count(model.build, layout.path(layout.MODEL_RECORD, model=key))


def check_targets(targets: list[str], settings: Settings) -> None:
    """Raise ConfigError for a requested target that no configured model (or static baseline) can produce.

    A target inside a corpus's folder must name a configured corpus (or the usages'), one inside a model's folder
    a configured model; a single layer's file must name a
    layer in the model's range (when the range is known); a static baseline's scores a configured one.
    """
    problems = [
        f"target {target}: extraction.store is false (never write the store); set extraction.store: auto or true to "
        "build it"
        for target in targets
        if settings.extraction.store is False and (target == "store" or _is_store_file(target))
    ]
    for target in targets:
        baseline = layout.baseline_of(target)
        if baseline is not None and baseline not in settings.static.baselines:
            allowed = ", ".join(settings.static.baselines) or "none"
            problems.append(
                f"target {target}: static baseline '{baseline}' is not in static.baselines; configured: {allowed}"
            )
        corpus = layout.corpus_of(target)
        if corpus is not None and corpus not in settings.corpora and corpus != layout.USAGES_CORPUS:
            problems.append(
                f"target {target}: corpus '{corpus}' is not configured; configured corpora: "
                f"{', '.join(settings.corpora)}"
            )
            continue
        key = layout.model_of(target)
        if key is None:
            continue
        if key not in settings.models:
            problems.append(
                f"target {target}: model key '{key}' is not configured; configured models: {', '.join(settings.models) or 'none'}"
            )
            continue
        layer, count = layout.layer_of(target), layer_count(settings, key)
        if layer is not None and count is not None and layer >= count:
            problems.append(f"target {target}: layer {layer} is out of range; model '{key}' has layers 0-{count - 1}")
    if problems:
        raise ConfigError("invalid target:\n  " + "\n  ".join(problems))


def _is_store_file(target: str) -> bool:
    """Whether ``target`` is a file of the store (a shard, a layer file, the manifest), which ``extraction.store:
    false`` never writes, requested by name or with the target ``store``."""
    parsed = layout.parse(target)
    return parsed is not None and parsed[0] in ("SHARD", "LAYER_FILE", "MANIFEST")
