"""The config against its schema: every mistake told in one sentence naming the key, and keys given twice.

Snakemake's own ``validate`` prints the whole schema on an error; ``validate_against_schema`` runs
first and says only what is wrong and what is allowed. YAML keeps the last of two equal keys silently;
``check_duplicate_keys`` names both lines.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from contextuality.core.settings import Settings

# workflow/schemas/config.schema.yaml (its home, by Snakemake convention), through the package's link to
# it: a wheel carries the file itself (package data), so a job whose package is installed rather than
# in src/ (a Kubernetes pod's image) finds it too.
SCHEMA = Path(__file__).with_name("config.schema.yaml")


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


# The schema's pattern of a sha256 digest (models.{key}.sha256, models.{key}.assemble.sha256), said in words.
SHA256_PATTERN = "^[0-9a-f]{64}$(?!\\n)"

# What the keys of a mapping whose key names must match a pattern are, for its message.
_NAMED_KEYS = {"models": "model key", "static.baselines": "baseline label", "corpora": "corpus name"}


def _key_path(error) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "(top level)"


def _describe(error, overrides: dict | None = None, configfiles=()) -> str:
    """One sentence for one jsonschema error: the key, what is wrong, what is allowed.

    ``overrides``: the values given with ``--config``; a string there, nested in a section, is a value Snakemake
    passed as a string, and the message says how to give it its type (a YAML overlay after ``configfiles``, the
    run's own config files, or the default config's when none are known).
    """
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
        if _nested_command_line_string(error, overrides):
            after = (f"your config files, --configfile {' '.join(map(_shown_path, configfiles))} mine.yaml" if configfiles
                     else "the default config, --configfile config/config.yaml mine.yaml")  # fmt: skip
            hint = (
                f" (Snakemake passes a value nested in --config, such as {_nested_example(error)}, as a string: put "
                f"it in a YAML file and add that file after {after})"
            )
        return f"{key}: {error.instance!r} has the wrong type; expected {expected}{hint}"
    if error.validator in ("oneOf", "anyOf"):
        expected = " or ".join(_alternative(option) for option in error.validator_value)
        return f"{key}: {error.instance!r} is not allowed; expected {expected}"
    if error.validator in ("minimum", "maximum"):
        word = "at least" if error.validator == "minimum" else "at most"
        return f"{key}: {error.instance!r} is out of range; must be {word} {error.validator_value}"
    if error.validator == "required":
        return f"{key}: {error.message}"
    if error.validator == "pattern" and "propertyNames" in error.schema_path:
        noun = _NAMED_KEYS.get(key, "key")
        return (
            f"{key}: {noun} {error.instance!r} is not allowed; it names files and folders, so it must match "
            f"{schema['pattern']!r} in full (letters, digits, '_' and '-', starting with a letter or digit)"
        )
    if error.validator == "pattern" and schema["pattern"] == SHA256_PATTERN:
        return f"{key}: {error.instance!r} is not a full sha256 digest; write all 64 lowercase hexadecimal digits"
    if error.validator == "pattern":
        return f"{key}: {error.instance!r} does not match the allowed pattern {schema['pattern']!r}"
    return f"{key}: {error.message}"


def _shown_path(path) -> str:
    """A config file as a command line names it: relative to the working directory when it is inside it."""
    import os

    absolute = os.path.abspath(path)
    return os.path.relpath(absolute) if absolute.startswith(os.getcwd() + os.sep) else str(path)


def _nested_command_line_string(error, overrides: dict | None) -> bool:
    """Whether the error's value is a string given with --config inside a section (``extraction={batch_size: 32}``).

    Snakemake reads a top-level ``--config key=value`` with YAML's types, but keeps every value nested in a mapping
    a string, so such a value never has the type the schema wants unless that type is a string.
    """
    path = list(error.absolute_path)
    if not overrides or len(path) < 2 or not isinstance(error.instance, str):
        return False
    value = overrides
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return value == error.instance


def _nested_example(error) -> str:
    path = [str(part) for part in error.absolute_path]
    inner = path[-1] + ": " + error.instance
    for part in reversed(path[1:-1]):
        inner = f"{part}: {{{inner}}}"
    return f"'{path[0]}={{{inner}}}'"


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


def _keys_not_text(section: dict, at: str = ""):
    """One line per key that YAML read as a number, a boolean or null (an unquoted year: ``2012:``)."""
    for key, value in section.items():
        where = f"{at}.{key}" if at else str(key)
        if not isinstance(key, str):
            years = " (the years '2012' to '2016')" if at.endswith("hub_revisions") else ""
            yield (
                f"{at or '(top level)'}: the key {key!r} is read by YAML as {type(key).__name__}, not text; allowed: "
                f"keys as text{years}; quote it: '{key}':"
            )
        elif isinstance(value, dict):
            yield from _keys_not_text(value, where)


def validate_against_schema(
    config: dict, schema_path: str | Path, overrides: dict | None = None, configfiles=()
) -> None:
    """Raise ConfigError listing every schema violation, one line each (no schema dump).

    ``overrides``: the values given with ``--config`` (Snakemake's ``overwrite_config``), which some messages name,
    with ``configfiles``, the files the config was read from.
    """
    schema = yaml.safe_load(Path(schema_path).read_text())
    unquoted = list(_keys_not_text(config))
    if unquoted:  # jsonschema's patterns would raise a TypeError on them
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(unquoted))
    validator = strict_validator_class()(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError(
            "invalid configuration:\n  " + "\n  ".join(_describe(error, overrides, configfiles) for error in errors)
        )


def fill_defaults(config: dict) -> dict:
    """``config`` validated against the schema, with every default filled in (in place, as the Snakefile does)."""
    from snakemake.utils import validate

    validate(config, schema=str(SCHEMA))
    return config


def load_settings(config: dict) -> Settings:
    """The settings of a (partial) config: validated against the schema, defaults filled in."""
    import copy

    return Settings.from_config(fill_defaults(copy.deepcopy(config)))
