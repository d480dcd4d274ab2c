"""The package's stages import only the stages below them (every import statement, function-level ones too)."""

from __future__ import annotations

import ast

from conftest import PROJECT

PACKAGE = PROJECT / "src" / "contextuality"
# Bottom to top: a stage may import itself and what comes before it (contextuality/__init__.py says why).
STAGES = (
    "core",
    "paper",
    "store",
    "corpus",
    "models",
    "extraction",
    "static",
    "measure",
    "senses",
    "report",
    "workflow",
    "notebook",
)


def _stage(path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _imported_stages(path) -> set[str]:
    stages = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module != "contextuality" else [f"contextuality.{a.name}" for a in node.names]
        stages |= {name.split(".")[1] for name in names if name.startswith("contextuality.")}
    return stages


def test_every_module_belongs_to_a_stage():
    modules = [path for path in PACKAGE.rglob("*.py") if path != PACKAGE / "__init__.py"]
    assert {_stage(path) for path in modules} == set(STAGES)


def test_a_stage_imports_only_the_stages_below_it():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        own = STAGES.index(_stage(path))
        upward += [
            f"{path.relative_to(PACKAGE)} imports {stage}"
            for stage in sorted(_imported_stages(path))
            if STAGES.index(stage) > own
        ]
    assert upward == []


def test_each_subpackage_says_its_room_in_one_line():
    for stage in STAGES:
        init = PACKAGE / stage / "__init__.py"
        if stage == "paper":
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and "\n" not in docstring.strip(), stage
        assert init.read_text().strip().count("\n") == 0, f"{stage}/__init__.py holds more than its one line"
