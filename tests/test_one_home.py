"""Facts with one home each, so that they cannot drift apart: a second home coming back fails here.

Each test names the fact, where it lives, and what restated it before.
"""

from __future__ import annotations

import ast

from conftest import PROJECT

PACKAGE = PROJECT / "src" / "contextuality"


def _python_files():
    return [*sorted(PACKAGE.rglob("*.py")), *sorted((PROJECT / "workflow" / "scripts").rglob("*.py"))]


def _source(path) -> str:
    return path.read_text()


def test_what_a_model_source_can_do_is_read_from_its_source_class():
    """Seven string tests on source names (``record["source"] == "elmo"``, ``model.source == "hub"``, ...) stood
    beside the ``models.sources.Source`` registry; its flags say it now. Left: the stages below ``models``, which
    cannot read the registry (core.settings: a random model's seed; paper: the paper's own checkpoints)."""
    from contextuality.models.sources import SOURCES

    names = set(SOURCES)
    found = []
    for path in _python_files():
        text = _source(path)
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            collections = (ast.Tuple, ast.List, ast.Set)
            values = [n for side in sides for n in (side.elts if isinstance(side, collections) else [side])]
            strings = {n.value for n in values if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            about_source = any("source" in ast.get_source_segment(text, side) for side in sides)
            # a corpus source ("bundled", "hub", ...) is not a model source: the corpus stage's, or a corpus's
            about_corpus = "corpus" in path.parts or "corpus" in ast.get_source_segment(text, node)
            if about_source and strings and strings <= names and not about_corpus:
                found.append(f"{path.relative_to(PROJECT)}: {ast.get_source_segment(text, node)}")
    below = ("src/contextuality/core/", "src/contextuality/paper.py")
    below_models = [line for line in found if line.startswith(below)]
    assert found == below_models and len(below_models) == 3, found


def test_whether_a_model_is_a_decoder_is_decided_in_one_place():
    """faithful.is_decoder, heads._head_kind, the plan job and the sense job each read a model type or decided
    decoder against encoder on their own: ``models.kind`` does both now."""
    deciding = [str(path.relative_to(PROJECT)) for path in _python_files()
                if "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES" in _source(path) or "def is_decoder" in _source(path)
                or '.get("model_type")' in _source(path)]  # fmt: skip
    # loading.py reads a model type for another question: whether the architecture is transformers' own code
    assert deciding == ["src/contextuality/models/kind.py", "src/contextuality/models/loading.py"]


def test_table1s_tasks_are_listed_once():
    """A task's metric (scoring._TASKS), its files (benchmark_files._FIXED_FILES) and its loader and scorer stood
    in parallel dicts: benchmark_files.TASKS holds what a task is, scoring adds only its loader and scorer."""
    from contextuality.paper import TABLE1_TASKS
    from contextuality.static import scoring
    from contextuality.static.benchmark_files import TASKS

    assert tuple(TASKS)[: len(TABLE1_TASKS)] == TABLE1_TASKS
    assert tuple(scoring._SCORING) == tuple(TASKS)
    assert scoring.TASK_METRIC == {task: spec.metric for task, spec in TASKS.items()}
    restating = [path.name for path in sorted((PACKAGE / "static").glob("*.py"))
                 if '"spearman"' in _source(path) and path.name != "benchmark_files.py"]  # fmt: skip
    assert restating == []


def test_a_layers_two_digits_are_written_in_one_place():
    """store.files.layer_name wrote the layer's two digits itself, beside core.layout.layer_label."""
    from contextuality.core.layout import layer_label
    from contextuality.store.files import layer_name

    assert layer_name(7) == f"layer_{layer_label(7)}" == "layer_07" and layer_name(123) == "layer_123"
    writing = [str(path.relative_to(PROJECT)) for path in _python_files() if ":02d}" in _source(path)]
    assert writing == ["src/contextuality/core/layout.py"]


def test_no_job_reads_back_its_own_output():
    """combine_layers wrote layers.parquet, then read it back to write layers.csv: both are written from the
    table in memory now (measure.combine.combine_layers' out_layers_csv)."""
    import re

    reading = re.compile(r"read_\w+\(\s*snakemake\.output")
    scripts = sorted((PROJECT / "workflow" / "scripts").glob("*.py"))
    assert [path.name for path in scripts if reading.search(_source(path))] == []
