"""The runner of the real command line stops a run that stalls, never one that is only slow (a loaded machine)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import pytest

from conftest import _wait_while_progressing

WRITES_EVERY_HALF_SECOND = """
import pathlib, sys, time
for i in range(8):
    pathlib.Path(sys.argv[1], f"part_{i}").write_text("x")
    time.sleep(0.5)
"""


def _run(code: str, workdir, stall_s: float) -> subprocess.Popen:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen([sys.executable, "-c", code, str(workdir)], stdout=out, stderr=err,
                                   start_new_session=True)  # fmt: skip
        _wait_while_progressing(process, workdir, (out, err), stall_s)
        return process


def test_a_run_that_keeps_writing_outlives_the_stall_limit(tmp_path):
    started = time.monotonic()
    process = _run(WRITES_EVERY_HALF_SECOND, tmp_path, stall_s=1.5)
    assert process.returncode == 0 and time.monotonic() - started > 3.5  # 4 s of work against a 1.5 s limit
    assert len(list(tmp_path.iterdir())) == 8


def test_a_run_that_prints_and_writes_nothing_is_stopped_with_a_sentence_naming_the_limit(tmp_path):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"wrote no file for 1 s: it stalled .*tests/conftest.py"):
        _run("import time; time.sleep(60)", tmp_path, stall_s=1.0)
    assert time.monotonic() - started < 30
