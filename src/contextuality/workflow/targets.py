"""Requested targets, checked before any job like the config: a model that is not configured, a layer out
of range, a static baseline that is not listed, each stop the run in one line."""

from __future__ import annotations

from pathlib import Path

from contextuality.core import layout
from contextuality.core.settings import Settings
from contextuality.models.sources import SOURCES
from contextuality.workflow.schema import ConfigError


def command_line_targets(argv: list[str] | None = None) -> list[str]:
    """The targets of this ``snakemake`` command, as Snakemake's own argument parser reads them.

    Snakemake hands its parsed targets to the workflow only after the Snakefile is parsed (its DAG
    settings are set after the include), so the target check, which must run before any job, asks
    Snakemake's parser instead of matching words by hand. None for a job Snakemake spawns itself
    (``--target-jobs``: planned from checked targets) or a process that is not the snakemake CLI.
    """
    import sys

    argv = sys.argv if argv is None else argv
    program = Path(argv[0]) if argv else Path()
    if not (program.name.startswith("snakemake") or program.parent.name == "snakemake"):  # `python -m snakemake`
        return []
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(argv[1:])
    except SystemExit:  # Snakemake itself will report the bad command line
        return []
    return [] if args.target_jobs else [str(target) for target in args.targets]


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
    problems = []
    if "store" in targets and settings.extraction.store is False:
        problems.append("target store: extraction.store is false (never write the store); set extraction.store: auto "
                        "or true to build it")
    for target in targets:
        baseline = layout.baseline_of(target)
        if baseline is not None and baseline not in settings.static.baselines:
            allowed = ", ".join(settings.static.baselines) or "none"
            problems.append(f"target {target}: static baseline '{baseline}' is not in static.baselines; configured: {allowed}")
        corpus = layout.corpus_of(target)
        if corpus is not None and corpus not in settings.corpora and corpus != layout.USAGES_CORPUS:
            problems.append(f"target {target}: corpus '{corpus}' is not configured; configured corpora: "
                            f"{', '.join(settings.corpora)}")
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
