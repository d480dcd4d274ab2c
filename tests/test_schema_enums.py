"""Each enum of the config schema that Python restates is tied to its Python tuple, so that neither drifts.

The schema (``workflow/config.schema.yaml``) is what a config is checked against; the code keeps its own tuple
of the same values where it checks direct callers or dispatches on them. A value added to one side only
would pass the schema and fail in a job, or never be reachable from a config.
"""

from __future__ import annotations

import yaml

from contextuality.workflow.schema import SCHEMA


def _enums() -> dict[str, list]:
    """Every enum in the schema, by its dotted path (``properties`` left out, ``oneOf`` branches numbered)."""
    found = {}

    def walk(node, path):
        if isinstance(node, dict):
            if "enum" in node:
                found[".".join(path)] = node["enum"]
            for key, value in node.items():
                walk(value, path if key == "properties" else [*path, key])
        elif isinstance(node, list):
            for number, value in enumerate(node):
                walk(value, [*path, str(number)])

    walk(yaml.safe_load(SCHEMA.read_text()), [])
    return found


def _python_values() -> dict[str, tuple]:
    """The Python home of each restated enum (null: the schema's "not set", which Python spells None)."""
    from contextuality.corpus import sources as corpus_sources
    from contextuality.corpus.sts import RELEASES
    from contextuality.corpus.words import COUNT_MODES
    from contextuality.measure.engine.backend import COMPUTE_DTYPES
    from contextuality.measure.engine.transforms import VARIANTS
    from contextuality.measure.layer_job import SELF_SIMILARITY_MODES
    from contextuality.measure.similarity import measures as similarity
    from contextuality.measure.similarity import rows as similarity_rows
    from contextuality.measure.similarity import sample as similarity_sample
    from contextuality.measure.similarity import tables as similarity_tables
    from contextuality.models import assemble
    from contextuality.models import sources as model_sources
    from contextuality.models.randommodels import HEADS
    from contextuality.paper import PAPER_MODELS
    from contextuality.report.atlas_inputs import TRAININGS

    return {
        "$defs.corpus.source": corpus_sources.SOURCES,
        "$defs.corpus.years.items": tuple(sorted({year for year, _ in RELEASES})),
        "words.count": COUNT_MODES,
        "metrics.self_similarity": SELF_SIMILARITY_MODES,
        "metrics.postprocess.items": VARIANTS,
        "metrics.compute_dtype": tuple(COMPUTE_DTYPES),
        "$defs.model.source": tuple(model_sources.SOURCES),
        "$defs.model.assemble.then": assemble.THEN,
        "$defs.model.head": (*HEADS, None),
        "$defs.model.stands_for": (*PAPER_MODELS, None),
        # the config's "not stated" (null) is the atlas's "unknown"
        "$defs.model.training": (*(training for training in TRAININGS if training != "unknown"), None),
        "similarity.measures.items": similarity.MEASURES,
        "similarity.variants.items": similarity_rows.VARIANTS,
        "similarity.compute_dtype": similarity_rows.COMPUTE_DTYPES,
        "similarity.subword_pooling": (*similarity_sample.POOLINGS, "model"),
        "similarity.pairs": similarity_tables.PAIRS,
    }


# Enums with no tuple of their own in Python: the code compares against single values where it needs them.
SCHEMA_ONLY = {
    "extraction.compute_dtype", "extraction.storage_dtype", "extraction.max_length_policy", "extraction.store.oneOf.1",
    "metrics.intra_sentences.oneOf.1", "metrics.device", "figures.x_axis", "$defs.model.architecture",
    "$defs.model.indexing", "$defs.model.tokenization", "$defs.model.pooling", "senses.usages.source",
}  # fmt: skip


def test_each_restated_enum_holds_the_schemas_values():
    enums = _enums()
    mismatched = {path: (enums.get(path), values) for path, values in _python_values().items()
                  if sorted(map(str, enums.get(path) or [])) != sorted(map(str, values))}  # fmt: skip
    assert mismatched == {}


def test_every_schema_enum_is_tied_to_python_or_said_to_have_no_tuple():
    """A new enum in the schema is either tied above, or listed as the schema's alone."""
    assert set(_enums()) == set(_python_values()) | SCHEMA_ONLY
