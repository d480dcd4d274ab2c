"""What every workflow script shares (contextuality.core.runtime): its start and the names of its files."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from contextuality.core.archive import pack
from contextuality.core.runtime import job_files, script_job


def test_a_script_job_logs_to_its_rule_log_and_ends_an_expected_error_as_its_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stderr", __import__("sys").stderr)  # setup_job_logging points stderr at the log
    # as in a job's fresh process: an earlier test in this one may have set the package logger's own level
    monkeypatch.setattr(logging.getLogger("contextuality"), "level", logging.NOTSET)
    log_path = tmp_path / "logs" / "job.log"
    with pytest.raises(SystemExit) as ended:
        with script_job(SimpleNamespace(log=[str(log_path)]), KeyError) as log:
            log.info("started")
            raise KeyError("no such word")
    assert ended.value.code == 1
    lines = log_path.read_text().splitlines()
    assert lines[0].endswith("INFO contextuality: started") and lines[1].endswith("ERROR contextuality: 'no such word'")
    with pytest.raises(ValueError), script_job(SimpleNamespace(log=[]), KeyError):  # no log: stderr; others propagate
        raise ValueError("a bug keeps its traceback")
    logging.getLogger().handlers.clear()


def test_job_files_names_a_script_files_as_its_entry_point_takes_them(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    pack(tmp_path / "model", tmp_path / "model.tar")
    job = SimpleNamespace(
        input=SimpleNamespace(record="m/source.json", model=str(tmp_path / "model.tar"), tokens="p/tokens.npy"),
        output=SimpleNamespace(units="p/units.parquet"),
    )
    files = job_files(job, inputs=("record", "model", "tokens"), outputs=("units",))
    assert files == {
        "record_path": Path("m/source.json"),
        "tokens_path": Path("p/tokens.npy"),
        "model_dir": tmp_path / "model",
        "out_units": Path("p/units.parquet"),
    }
    assert (files["model_dir"] / "config.json").read_text() == "{}"
    assert job_files(job) == {}
