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


# measure/'s rooms, bottom to top: a module may import its own room and the rooms before it. The modules at
# measure/'s top level are the jobs, the top room.
MEASURE = PACKAGE / "measure"
MEASURE_ROOMS = ("reference", "engine", "similarity", "device", "jobs")


def _measure_room(dotted: str) -> str:
    """The room of a module of measure/ (``contextuality.measure.engine.backend``: engine)."""
    first = dotted.split(".")[2] if dotted.count(".") >= 2 else ""
    return first if first in MEASURE_ROOMS else "jobs"


def _imported_measure_modules(path) -> set[str]:
    """The modules of measure/ that ``path`` imports (``from contextuality.measure import x``: x)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "contextuality.measure":
            names |= {f"contextuality.measure.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {name for name in names if name.startswith("contextuality.measure.")}


def _upward_in_measure(path, module: str) -> list[str]:
    """The imports of ``path`` (the module ``module`` of measure/) into a room above its own."""
    own = MEASURE_ROOMS.index(_measure_room(module))
    imported = sorted(_imported_measure_modules(path))
    return [f"{module} imports {name}" for name in imported if MEASURE_ROOMS.index(_measure_room(name)) > own]


def test_measure_rooms_import_only_the_rooms_below_them():
    folders = {path.name for path in MEASURE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == set(MEASURE_ROOMS) - {"jobs"}
    upward = []
    for path in sorted(MEASURE.rglob("*.py")):
        upward += _upward_in_measure(
            path, ".".join(("contextuality", *path.relative_to(PACKAGE).with_suffix("").parts))
        )
    assert upward == []


def test_the_measure_room_check_finds_an_upward_import(tmp_path):
    rows = tmp_path / "rows.py"
    rows.write_text("from contextuality.measure import layer_job\nfrom contextuality.measure.engine import backend\n")
    upward = _upward_in_measure(rows, "contextuality.measure.similarity.rows")
    assert upward == ["contextuality.measure.similarity.rows imports contextuality.measure.layer_job"]
    assert _upward_in_measure(rows, "contextuality.measure.combine") == []


def test_each_measure_room_says_what_it_holds_in_one_line():
    for room in MEASURE_ROOMS[:-1]:
        init = (MEASURE / room / "__init__.py").read_text()
        docstring = ast.get_docstring(ast.parse(init))
        assert docstring and "\n" not in docstring.strip(), room
        assert init.strip().count("\n") == 0, f"measure/{room}/__init__.py holds more than its one line"
    assert len([path for path in MEASURE.glob("*.py") if path.name != "__init__.py"]) <= 12


SENSES = PACKAGE / "senses"
# senses/'s rooms bottom to top (a folder or a top-level module): a room may import itself and the rooms before it.
SENSES_ROOMS = ("combine", "rows", "vectors", "memory", "lexicon", "sts", "separation", "output", "job", "device")


def _senses_room(path) -> str:
    """A module's room: its folder under senses/, or the top-level module itself."""
    return path.relative_to(SENSES).parts[0].removesuffix(".py")


def _imported_senses_rooms(path) -> set[str]:
    """The rooms of senses/ that ``path`` imports from (``from contextuality.senses import memory`` included)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = getattr(node, "module", None)
            imported |= {alias.name if module is None else f"{module}.{alias.name}" for alias in node.names}
    return {name.split(".")[2] for name in imported if name.startswith("contextuality.senses.")}


def test_senses_rooms_import_only_the_rooms_below_them():
    modules = [path for path in sorted(SENSES.rglob("*.py")) if path != SENSES / "__init__.py"]
    assert {_senses_room(path) for path in modules} == set(SENSES_ROOMS)
    upward = [
        f"{path.relative_to(SENSES)} imports {room}"
        for path in modules
        for room in sorted(_imported_senses_rooms(path))
        if SENSES_ROOMS.index(room) > SENSES_ROOMS.index(_senses_room(path))
    ]
    assert upward == []


def test_senses_top_level_and_each_folder_says_its_room_in_one_line():
    assert len(list(SENSES.glob("*.py"))) <= 12
    for init in sorted(SENSES.glob("*/__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and "\n" not in docstring.strip(), init.parent.name
        assert init.read_text().strip().count("\n") == 0, (
            f"senses/{init.parent.name}/__init__.py holds more than its one line"
        )
