"""Configuration checks: schema errors and semantic ones, each told in one sentence naming the key.

Snakemake's own ``validate`` prints the whole schema on an error; ``validate_against_schema`` runs
first and says only what is wrong and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REQUIRED_BY_SOURCE = {
    "hub": ("id", "revision"),
    "pypi": ("package", "version"),
    "path": ("path",),
    "elmo": ("options", "weights"),
    "random": ("architecture",),
}


class ConfigError(ValueError):
    """The configuration is valid against the schema but cannot be run."""


class _DuplicateKeyLoader(yaml.SafeLoader):
    """A SafeLoader that records every key given twice in one mapping (PyYAML silently keeps the last).

    Each mapping's keys are checked before its values are built, so the dotted path of every value
    (``models.tiny-bert``) is known when its own mapping is checked. Merge keys (``<<: *base``) may be
    overridden on purpose and are not duplicates.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[tuple[str, int, int]] = []  # (dotted key, line, line of the first one)
        self._paths: dict[int, str] = {}

    def construct_mapping(self, node, deep=False):
        parent = self._paths.get(id(node), "")
        first_line: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue
            dotted = f"{parent}.{key}" if parent else str(key)
            self._paths[id(value_node)] = dotted
            line = key_node.start_mark.line + 1
            if key in first_line:
                self.duplicates.append((dotted, line, first_line[key]))
            else:
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def duplicate_keys(path: str | Path) -> list[str]:
    """One line per key given twice in the same mapping of a YAML (or JSON) file: ``FILE:LINE: ...``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []  # Snakemake read it already; anything unreadable is its error to report
    loader = _DuplicateKeyLoader(text)
    try:
        loader.get_single_data()
    except yaml.YAMLError:
        return []  # not YAML (Snakemake also reads JSON that YAML cannot): nothing to check here
    finally:
        loader.dispose()
    return [
        f"{path}:{line}: duplicate key '{key}' (first at line {first}); YAML would silently keep only the "
        "last one, so remove or rename one of them"
        for key, line, first in sorted(loader.duplicates, key=lambda duplicate: duplicate[1])
    ]


def check_duplicate_keys(paths) -> None:
    """Raise ConfigError naming every duplicate key (file and line) in the config files Snakemake read.

    ``paths``: ``workflow.configfiles`` (the ``--configfile`` files, or config/config.yaml without one).
    """
    problems = [line for path in paths for line in duplicate_keys(path)]
    if problems:
        raise ConfigError("\n".join(problems))


def _key_path(error) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "(top level)"


def _describe(error) -> str:
    """One sentence for one jsonschema error: the key, what is wrong, what is allowed."""
    key = _key_path(error)
    schema = error.schema
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = key if key != "(top level)" else "the top level"
        if schema.get("patternProperties"):
            return f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed keys match {list(schema['patternProperties'])}"
        return f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed: {', '.join(allowed)}"
    if error.validator == "enum":
        return f"{key}: {error.instance!r} is not allowed; allowed: {', '.join(map(repr, schema['enum']))}"
    if error.validator == "type":
        expected = " or ".join(_as_list(schema["type"]))
        hint = ""
        if isinstance(error.instance, float) and "integer" in _as_list(schema["type"]) and error.instance.is_integer():
            hint = f" (write {int(error.instance)}, not {error.instance!r})"
        return f"{key}: {error.instance!r} has the wrong type; expected {expected}{hint}"
    if error.validator in ("oneOf", "anyOf"):
        expected = " or ".join(_alternative(option) for option in error.validator_value)
        return f"{key}: {error.instance!r} is not allowed; expected {expected}"
    if error.validator in ("minimum", "maximum"):
        word = "at least" if error.validator == "minimum" else "at most"
        return f"{key}: {error.instance!r} is out of range; must be {word} {error.validator_value}"
    if error.validator == "required":
        return f"{key}: {error.message}"
    if error.validator == "pattern":
        return f"{key}: {error.instance!r} does not match the allowed pattern {schema['pattern']!r}"
    if error.validator == "propertyNames":
        return f"{key}: model key {error.instance!r} must match {schema['propertyNames']['pattern']!r}"
    return f"{key}: {error.message}"


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _alternative(schema: dict) -> str:
    """One branch of a oneOf/anyOf in words: ``integer at least 2``, ``'all'``."""
    if "enum" in schema:
        return " or ".join(map(repr, schema["enum"]))
    words = " or ".join(_as_list(schema.get("type", "any value")))
    if "minimum" in schema:
        words += f" at least {schema['minimum']}"
    if "maximum" in schema:
        words += f" at most {schema['maximum']}"
    return words


def strict_validator_class():
    """Draft 2020-12, except that a float is never an integer (jsonschema accepts 2.0 as one).

    ``n_shards: 2.0`` must stop the run here, not pass the schema and fail later, when a step needs an int.
    """
    from jsonschema import Draft202012Validator, validators

    base = Draft202012Validator.TYPE_CHECKER
    checker = base.redefine(
        "integer", lambda checker, instance: base.is_type(instance, "integer") and not isinstance(instance, float)
    )
    return validators.extend(Draft202012Validator, type_checker=checker)


def validate_against_schema(config: dict, schema_path: str | Path) -> None:
    """Raise ConfigError listing every schema violation, one line each (no schema dump)."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = strict_validator_class()(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(_describe(error) for error in errors))


def check_config(config: dict) -> None:
    """Raise ConfigError with every problem found, one line each."""
    problems = []
    models = config.get("models") or {}
    if not models:
        problems.append("models: no model configured; add at least one entry (see config/README.md)")
    for key, model in models.items():
        source = model.get("source")
        for field in REQUIRED_BY_SOURCE.get(source, ()):
            if not model.get(field):
                allowed = ", ".join(REQUIRED_BY_SOURCE[source])
                problems.append(f"models.{key}.{field}: missing; a '{source}' model needs {allowed}")
        if model.get("tokenization") == "faithful" and (source == "elmo" or model.get("indexing") == "subword"):
            problems.append(
                f"models.{key}.tokenization: 'faithful' rebuilds the paper's GPT-2 input from spaCy words; it needs a "
                "Hugging Face decoder with indexing 'word'"
            )
        if source == "elmo" and model.get("indexing") == "subword":
            problems.append(f"models.{key}.indexing: ELMo reads whole spaCy words; allowed: 'word'")
        if model.get("gguf_file") and source not in ("pypi", "path"):
            problems.append(f"models.{key}.gguf_file: only used with source 'pypi' or 'path', not '{source}'")
    extraction = config.get("extraction", {})
    if extraction.get("device") == "cpu" and extraction.get("compute_dtype", "float32") != "float32":
        problems.append(
            f"extraction.compute_dtype: {extraction['compute_dtype']} needs a CUDA device; "
            "on device 'cpu' use float32"
        )
    problems += check_hub_revisions(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


# What huggingface_hub treats as a commit (REGEX_COMMIT_HASH); anything else is looked up as a branch or tag.
_COMMIT_HASH = re.compile(r"[0-9a-f]{40}")


def check_hub_revisions(config: dict) -> list[str]:
    """One line per hub revision that is not a full commit hash: hub models and corpus.hub_revisions.

    A branch or tag (``main``, ``v1.0``) or a shortened hash names different files as the repository
    changes, so the run would not be reproducible; offline, huggingface_hub resolves it through the
    cache's ``refs/``, which says what was downloaded last, not what was configured.
    """
    needed = "a commit hash is required: the full 40-character lower-case hash (a branch or tag such as 'main' can move)"
    problems = []
    for key, model in (config.get("models") or {}).items():
        revision = model.get("revision")
        if model.get("source") == "hub" and revision and not _COMMIT_HASH.fullmatch(str(revision)):
            problems.append(f"models.{key}.revision: {revision!r} is not a commit hash; {needed}")
    for year, revision in ((config.get("corpus") or {}).get("hub_revisions") or {}).items():
        if not _COMMIT_HASH.fullmatch(str(revision)):
            problems.append(f"corpus.hub_revisions.{year}: {revision!r} is not a commit hash; {needed}")
    return problems


def check_bundled_corpus(config: dict) -> None:
    """Raise ConfigError with the one line naming the first malformed bundled release file and line.

    Run when the workflow is parsed (the selected files parse in about 0.1 s), so that a malformed file
    stops the run before any job with ``FILE:LINE: what is wrong; what is expected`` as its message,
    not as the last line of a job's traceback. The hub source has no files to check, and a missing
    ``corpus.bundled_dir`` is left to Snakemake's missing-input error.
    """
    corpus = config.get("corpus") or {}
    root = Path(corpus.get("bundled_dir", "resources/sts"))
    if corpus.get("source", "bundled") != "bundled" or not root.is_dir():
        return
    from contextuality.corpus.sts import CorpusError, check_bundled_release_files

    try:
        check_bundled_release_files(root, corpus.get("years", []), corpus.get("include_2012_train", False))
    except CorpusError as err:
        raise ConfigError(str(err)) from None


# --------------------------------------------------------------------------------------------------
# Requested targets (checked before any job, like the config)

# A per-model result path: results/{metrics,embeddings,export,static}/{model}/...
_MODEL_TARGET = re.compile(r"^(?:\./)?results/(metrics|embeddings|export|static)/([^/]+)(?:/(.*))?$")
# A file of one layer: layers/layer_NN.h5 of the embeddings; pcs/layer_NN.txt, per_layer/layer_NN.* of the metrics.
_LAYER_FILE = re.compile(r"^(?:layers|pcs|per_layer)/layer_(\d+)\.")


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


def layer_count(key: str, spec: dict, models_dir: str | Path = "resources/models") -> int | None:
    """Layers a model returns (input layer included), when known before extraction; else None.

    A random model's count is in its config; any other model's is in its ``source.json``, so it is
    known once the model is built.
    """
    if spec.get("source") == "random":
        return int(spec.get("n_hidden_layers", 2)) + 1
    from contextuality.models.loading import record_shape

    shape = record_shape(Path(models_dir) / key / "source.json")
    return shape[0] if shape else None


def check_targets(targets: list[str], config: dict, models_dir: str | Path = "resources/models") -> None:
    """Raise ConfigError for a requested per-model target that no configured model can produce.

    The model key must be configured (``results/static/baselines/{name}.csv``: a configured baseline),
    and a single layer's file must name a layer in the model's range (when the range is known).
    """
    models = config.get("models") or {}
    baselines = (config.get("static") or {}).get("baselines") or {}
    problems = []
    for target in targets:
        match = _MODEL_TARGET.match(target)
        if not match:
            continue
        family, key, rest = match.groups()
        if family == "static" and key == "baselines":
            name = Path(rest or "").stem
            if rest and name not in baselines:
                allowed = ", ".join(sorted(baselines)) or "none"
                problems.append(f"target {target}: static baseline '{name}' is not in static.baselines; configured: {allowed}")
            continue
        if key not in models:
            problems.append(
                f"target {target}: model key '{key}' is not configured; configured models: {', '.join(sorted(models)) or 'none'}"
            )
            continue
        layer_match = _LAYER_FILE.match(rest or "")
        if family in ("embeddings", "metrics") and layer_match:
            layer = int(layer_match.group(1))
            count = layer_count(key, models[key], models_dir)
            if count is not None and layer >= count:
                problems.append(
                    f"target {target}: layer {layer} is out of range; model '{key}' has layers 0-{count - 1}"
                )
    if problems:
        raise ConfigError("invalid target:\n  " + "\n  ".join(problems))
