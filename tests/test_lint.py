"""The lint and formatting CI runs: ``ruff check`` with the rules of pyproject.toml ([tool.ruff]) and ``ruff format``
over the Python code, ``snakefmt`` ([tool.snakefmt]) over the rules. A ``# fmt: skip`` keeps a statement as written
(an aligned table of values, a message's lines); ``ruff format`` honours it."""

from __future__ import annotations

import sys

from conftest import PROJECT, run_command

LINTED = ("src", "tests", "workflow/scripts", "benchmarks")
RULES = ("Snakefile", "workflow/rules")


def _run(*command: str):
    return run_command([sys.executable, "-m", *command], cwd=PROJECT, timeout=300)


def test_ruff_check_passes():
    # the test extra pins ruff; `python -m ruff` is the one installed beside the tests' Python
    result = _run("ruff", "check", "--no-cache", *LINTED)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_the_python_code_is_formatted():
    result = _run("ruff", "format", "--check", "--no-cache", *LINTED)
    assert result.returncode == 0, (
        f"run `ruff format {' '.join(LINTED)}`:\n" + result.stdout[-6000:] + result.stderr[-2000:]
    )


def test_the_rules_are_formatted():
    result = _run("snakefmt", "--check", *RULES)
    assert result.returncode == 0, (
        f"run `snakefmt {' '.join(RULES)}`:\n" + result.stdout[-6000:] + result.stderr[-2000:]
    )
