"""Configuration checks: schema errors and semantic ones, each told in one sentence naming the key.

Snakemake's own ``validate`` prints the whole schema on an error; ``validate_against_schema`` runs
first and says only what is wrong and what is allowed.
"""

from __future__ import annotations

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
        return f"{key}: {error.instance!r} has the wrong type; expected {schema['type']}"
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


def validate_against_schema(config: dict, schema_path: str | Path) -> None:
    """Raise ConfigError listing every schema violation, one line each (no schema dump)."""
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(Draft202012Validator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
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
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
