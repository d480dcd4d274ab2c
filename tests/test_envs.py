"""The conda environments of the rules: each lists what its rules' scripts import, pinned to what is tested.

For every rule, its script's imports are followed through the ``contextuality`` package (every
``import`` statement of every module it reaches, function-level ones included) to the third-party
packages they need; the rule's ``envs/*.yaml`` must list each of them, and each pin must equal the
version installed where the tests run (the versions CI installs, from ``envs/constraints.txt``). The
project itself is not installed into the environments: the workflow puts ``src/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from conftest import PROJECT

PACKAGE = PROJECT / "src" / "contextuality"
# Needed at run time by a library the scripts call, not imported by name: allowed in an env without an import.
RUNTIME_ONLY = {
    "pyarrow": "pandas reads and writes parquet through it",
    "gguf": "transformers reads GGUF files through it",
    "accelerate": "transformers requires it to load a GGUF file",
    "tabulate": "pandas renders Markdown tables through it",
    "jinja2": "pandas renders LaTeX tables through it",
}
# A rule's name and body (a rule inside an ``if`` block is indented: its body runs on to the block's end, and
# its own directives come first)
RULE = re.compile(r"^[ \t]*(?:rule|checkpoint) (\w+):\n((?:[ \t]+.*\n|\n)*)", re.M)


def rules() -> dict[str, tuple[Path, Path]]:
    """Every rule with a script: (its conda env file, its script), both resolved."""
    found = {}
    for smk in (PROJECT / "workflow" / "rules").glob("*.smk"):
        for name, body in RULE.findall(smk.read_text()):
            env = re.search(r"conda:\s*\n\s*\"([^\"]+)\"", body)
            script = re.search(r"script:\s*\n\s*\"([^\"]+)\"", body)
            if script:
                assert env, f"rule {name} has a script but no conda env"
                found[name] = ((smk.parent / env.group(1)).resolve(), (smk.parent / script.group(1)).resolve())
    return found


def _imports(path: Path) -> set[str]:
    """Every module a file imports (function-level imports included; not those under ``if TYPE_CHECKING:``,
    which never run)."""
    names = set()
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner) for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in node.body for inner in ast.walk(statement)
    }  # fmt: skip
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            if node.module.split(".")[0] == "contextuality":  # from contextuality.measure import panel
                names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _module_file(name: str) -> Path | None:
    """The file of a project module (``contextuality.measure.reference.isotropy``), or of a package's __init__."""
    relative = Path(*name.split(".")[1:])
    if not relative.parts:
        return PACKAGE / "__init__.py"
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.exists():
            return candidate
    return None  # a name imported from a module (a function, a class), not a module


@cache
def third_party(path: Path) -> frozenset[str]:
    """Top-level third-party modules a file needs, following the project's own modules."""
    needed = set()
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "contextuality":
            module = _module_file(name)
            if module is not None:
                needed |= third_party(module)
        elif top not in sys.stdlib_module_names and top != "__future__":
            needed.add(top)
    return frozenset(needed)


def distributions(modules: set[str]) -> set[str]:
    mapping = importlib.metadata.packages_distributions()
    return {canonical(mapping[module][0]) for module in modules if module in mapping}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(env: Path) -> dict[str, str]:
    spec = yaml.safe_load(env.read_text())
    pip = next(item["pip"] for item in spec["dependencies"] if isinstance(item, dict) and "pip" in item)
    return {canonical(line.split("==")[0]): line.split("==")[1] for line in pip}


@pytest.mark.parametrize("rule", sorted(rules()))
def test_each_rule_env_covers_its_scripts_imports(rule):
    env, script = rules()[rule]
    needed = distributions(set(third_party(script)))
    missing = needed - set(pins(env))
    assert not missing, (
        f"rule {rule}: {env.name} lacks {sorted(missing)} (imported by {script.name} through the package)"
    )


@pytest.mark.parametrize("env", sorted((PROJECT / "envs").glob("*.yaml")), ids=lambda path: path.name)
def test_env_pins_are_exact_and_equal_the_tested_versions(env):
    spec = yaml.safe_load(env.read_text())
    assert "nodefaults" in spec["channels"]
    listed = [item for item in spec["dependencies"] if isinstance(item, str)]
    assert all(item == "pip" or re.fullmatch(r"python=3\.\d+", item) for item in listed), listed
    for name, version in pins(env).items():
        installed = Version(importlib.metadata.version(name)).public  # torch's "+cpu" is a local label
        assert installed == version, f"{env.name}: {name}=={version}, but the tests run with {installed}"
    assert not any("-e" in line or line.startswith("..") for line in pins(env)), (
        "the project is not installed into envs"
    )


def test_every_env_is_used_and_every_listed_package_is_needed():
    used = {env for env, _ in rules().values()}
    assert used == set((PROJECT / "envs").glob("*.yaml")) - {PROJECT / "envs" / "constraints.txt"}
    for env in used:
        needed = set()
        for rule_env, script in rules().values():
            if rule_env == env:
                needed |= distributions(set(third_party(script)))
        extra = set(pins(env)) - needed - set(RUNTIME_ONLY)
        assert not extra, f"{env.name} lists {sorted(extra)} that no script needs"


def test_constraints_pin_what_the_environments_pin():
    """CI installs with envs/constraints.txt, so the versions tested are the environments' versions."""
    constraints = {
        canonical(line.split("==")[0]): line.split("==")[1].strip()
        for line in (PROJECT / "envs" / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for env in (PROJECT / "envs").glob("*.yaml"):
        for name, version in pins(env).items():
            assert constraints.get(name) == version, (
                f"{env.name}: {name}=={version}, constraints.txt: {constraints.get(name)}"
            )
