"""The lint CI runs: ``ruff check`` with the rules of pyproject.toml ([tool.ruff]) over the Python code."""

from __future__ import annotations

import subprocess
import sys

from conftest import PROJECT

LINTED = ("src", "tests", "workflow/scripts", "benchmarks")


def test_ruff_check_passes():
    # the test extra pins ruff; `python -m ruff` is the one installed beside the tests' Python
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *LINTED], cwd=PROJECT,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
