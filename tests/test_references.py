"""Every module the shipped text names exists: ``contextuality.x.y`` names and ``src/contextuality/...`` paths.

Nine references named modules that had moved (``contextuality.writer`` in extraction/extract.py, the devices
module in the default profile, ...). A dotted name resolves when its longest module prefix exists and what
follows is a name that module defines (and, after a class, a name the class defines); a path resolves when
the file exists and, written ``path.py: name``, defines ``name``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import PROJECT

SRC = PROJECT / "src"
SHIPPED = ("src", "workflow", "profiles", "docs", "config", "envs", "README.md", "Snakefile", "pyproject.toml")
SUFFIXES = {".py", ".smk", ".md", ".yaml", ".yml", ".toml", ".rst", ".txt", ".cfg", ""}
DOTTED = re.compile(r"\bcontextuality(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(r"\bsrc/contextuality(?:/[A-Za-z0-9_]+)*(?:\.py)?(?:`?: `?([A-Za-z_][A-Za-z0-9_]*))?")
# Written into an output (summary.tex's first line), which stays byte-identical to the runs before the move.
KEPT = {("src/contextuality/report/summary.py", "contextuality.claims")}


def _shipped_files() -> list[Path]:
    files = []
    for name in SHIPPED:
        path = PROJECT / name
        files += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.is_file()]
    built = ("__pycache__", ".egg-info")  # made by Python and pip, not shipped
    return [p for p in files if p.suffix in SUFFIXES and not any(part.endswith(built) for part in p.parts)]


def _defined(tree: ast.AST) -> dict[str, ast.AST | None]:
    """The names a module (or class) body defines, each with its class node where it is one."""
    names: dict[str, ast.AST | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node if isinstance(node, ast.ClassDef) else None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id: None for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0]: None for alias in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module = _module_file(parts[:end])
        if module is not None:
            break
    rest = parts[end:]
    if not rest or rest[0].startswith("__"):
        return True
    names = _defined(ast.parse(module.read_text()))
    if rest[0] not in names:
        return False
    cls = names[rest[0]]
    return len(rest) == 1 or cls is None or rest[1] in _defined(cls)


def _stale() -> list[str]:
    stale = []
    for path in _shipped_files():
        text, where = path.read_text(errors="replace"), str(path.relative_to(PROJECT))
        for match in DOTTED.finditer(text):
            name = match.group(0)
            if (where, name) not in KEPT and not _resolves(name):
                stale.append(f"{where}:{text.count(chr(10), 0, match.start()) + 1}: {name}")
        for match in PATH.finditer(text):
            target, function = PROJECT / match.group(0).split(":")[0].rstrip("`"), match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            if not target.exists():
                stale.append(f"{where}:{line}: {target.relative_to(PROJECT)}")
            elif function and target.suffix == ".py" and function not in _defined(ast.parse(target.read_text())):
                stale.append(f"{where}:{line}: {function} in {target.relative_to(PROJECT)}")
    return stale


def test_every_named_module_exists():
    assert _stale() == []


def test_the_check_finds_a_moved_module():
    assert _resolves("contextuality.extraction.writer") and _resolves("contextuality.core.settings.Settings.shard")
    assert not _resolves("contextuality.writer") and not _resolves("contextuality.core.settings.Settings.nothing")
