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
            if not _resolves(name):
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


# A section cited by name: `docs/usage.md, "Scale out"`, `README, "Quick start"`, `the README's "Limits"`,
# `[docs/scaling.md](scaling.md), "Upstream"`; and a link's anchor, `usage.md#scale-out`. Three citations
# outlived their sections ("Word senses", "Two commands", "Containers") when the README was rewritten.
CATALOG = ".snakemake-workflow-catalog.yml"
_FILE = r"(README(?:\.md)?|[\w.-]+(?:/[\w.-]+)+\.md)"
SECTION_CITED = [
    re.compile(_FILE + r"[,:] \"([^\"]+)\""),
    re.compile(r"(README)'s \"([^\"]+)\""),
    re.compile(r"\]\(([^)#\s]+\.md)\),? \"([^\"]+)\""),
]
ANCHOR = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def _headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # a shell comment is no heading
    headings = [line.lstrip("#").strip() for line in text.splitlines() if re.match(r"#{1,6} ", line)]
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "") for h in headings]  # as rendered


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _cited_file(where: Path, name: str) -> Path | None:
    if name == "README":  # the project's, wherever it is cited from
        return PROJECT / "README.md"
    for base in (where.parent, PROJECT):
        if (base / name).is_file():
            return base / name
    return None


def _stale_sections(path: Path, text: str) -> list[str]:
    """The cited sections and anchors of ``text`` (the file ``path``'s) that no heading of their file has."""
    stale, where = [], path.relative_to(PROJECT)
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in SECTION_CITED:
            for name, section in pattern.findall(line):
                target = _cited_file(path, name)
                if target is None or not any(h.startswith(section) for h in _headings(target)):
                    stale.append(f"{where}:{number}: {name}, {section!r}")
        for name, anchor in ANCHOR.findall(line) if path.suffix == ".md" else []:
            target = path if not name else _cited_file(path, name)
            if target is not None and target.suffix == ".md" and anchor not in map(_slug, _headings(target)):
                stale.append(f"{where}:{number}: {name}#{anchor}")
    return stale


def test_every_cited_section_exists():
    files = _shipped_files() + [PROJECT / CATALOG]
    assert [line for path in files for line in _stale_sections(path, path.read_text(errors="replace"))] == []


def test_the_section_check_finds_a_section_that_is_gone():
    config_readme = PROJECT / "config" / "README.md"
    text = 'basic authentication: README, "Two commands"; the README\'s "Word senses" section;\n' + (
        '[docs/usage.md](../docs/usage.md#containers), docs/usage.md, "Scale out", README, "Quick start"'
    )
    assert _stale_sections(config_readme, text) == [
        "config/README.md:1: README, 'Two commands'",
        "config/README.md:1: README, 'Word senses'",
        "config/README.md:2: ../docs/usage.md#containers",
    ]
    assert _slug("Word senses: does a model tell a word's senses apart?") == (
        "word-senses-does-a-model-tell-a-words-senses-apart"
    )
