"""The runner of commands stops one that stalls, never one that is only slow (a loaded machine): run_snakemake and
run_command share the stall detector, and no test runs a command under a wall-clock limit of its own."""

from __future__ import annotations

import ast
import sys
import time

import pytest

from conftest import PROJECT, run_command

WRITES_EVERY_HALF_SECOND = """
import pathlib, sys, time
for i in range(8):
    pathlib.Path(sys.argv[1], f"part_{i}").write_text("x")
    time.sleep(0.5)
"""
PRINTS_EVERY_HALF_SECOND = """
import time
for i in range(8):
    print(f"step {i}")  # no flush: run_command's Python children write unbuffered
    time.sleep(0.5)
"""
PRINTS_THEN_SLEEPS = "import time; print('started'); time.sleep(60)"


def test_a_run_that_keeps_writing_outlives_the_stall_limit(tmp_path):
    started = time.monotonic()
    result = run_command([sys.executable, "-c", WRITES_EVERY_HALF_SECOND, tmp_path], timeout=1.5, watch=tmp_path)
    assert result.returncode == 0 and time.monotonic() - started > 3.5  # 4 s of work against a 1.5 s limit
    assert len(list(tmp_path.iterdir())) == 8


def test_a_run_that_prints_and_writes_nothing_is_stopped_with_a_sentence_naming_the_limit(tmp_path):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"wrote no file for 1 s: it stalled .*tests/conftest.py"):
        run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1.0, watch=tmp_path)
    assert time.monotonic() - started < 30


def test_a_command_that_keeps_printing_outlives_the_stall_limit():
    started = time.monotonic()
    result = run_command([sys.executable, "-c", PRINTS_EVERY_HALF_SECOND], timeout=1.5)
    assert result.returncode == 0 and time.monotonic() - started > 3.5  # 4 s of work against a 1.5 s limit
    assert result.stdout.splitlines() == [f"step {i}" for i in range(8)]


def test_a_command_that_prints_then_falls_silent_is_stopped_naming_the_limit_and_its_knob():
    started = time.monotonic()
    message = (r"^`\S*python\S* -c import time; print\('started'\); time.sleep\(60\)` printed nothing and wrote no "
               r"file for 1 s: it stalled \(a slow machine only makes it slower; this limit is run_command's timeout "
               r"in tests/conftest.py\)$")  # fmt: skip
    with pytest.raises(TimeoutError, match=message):
        run_command([sys.executable, "-c", PRINTS_THEN_SLEEPS], timeout=1.0)
    assert time.monotonic() - started < 30


def test_a_command_that_ends_is_returned_as_subprocess_run_returns_it(tmp_path):
    code = "import os, sys; print(os.getcwd()); print(os.environ['MARK'], file=sys.stderr); sys.exit(3)"
    result = run_command([sys.executable, "-c", code], cwd=tmp_path, env={"MARK": "seen"}, timeout=600)
    assert (result.returncode, result.stdout.strip(), result.stderr.strip()) == (3, str(tmp_path), "seen")


def test_no_test_runs_a_command_under_a_wall_clock_limit():
    """subprocess.run(..., timeout=300) turned a loaded machine into errors: a command a test runs with a limit goes
    through run_command (or run_snakemake), whose limit counts only silence."""
    found = []
    for path in sorted((PROJECT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"run", "check_output", "check_call", "call", "communicate"}
                    and any(keyword.arg == "timeout" for keyword in node.keywords)):  # fmt: skip
                found.append(f"{path.relative_to(PROJECT)}:{node.lineno}")
    assert found == []
