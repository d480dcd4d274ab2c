"""Each run's time is stated once: measured, in the README's *What it costs*; what the README quotes of the line a
run prints before any job is that line's own arithmetic (``run_need``), and the configs and docs that describe the
smoke run point there instead of giving a time of their own."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import PROJECT, with_absolute_data_paths
from contextuality.workflow import run_need
from contextuality.workflow.schema import load_settings

README = (PROJECT / "README.md").read_text()
COSTS = README.split("## What it costs", 1)[1].split("\n## ", 1)[0]
NUMBER_WORDS = "one|two|three|four|five|six|seven|eight|nine|ten"
DURATION = re.compile(rf"\b(\d+(\.\d+)?|{NUMBER_WORDS}) (minutes?|hours?)\b", re.I)


def _line(config: str, tmp_path, monkeypatch) -> tuple[int, str, float]:
    """The run's own line for ``config`` on 2 cores (in an empty folder: no built model or store counts): its jobs,
    its time as the line words it, and its stored bytes."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings(with_absolute_data_paths(yaml.safe_load((PROJECT / "config" / config).read_text())))
    need = run_need.run_need(settings)
    line = run_need.estimate_line(settings, need, 2, None)
    jobs, time = re.search(r"has about (\d+) jobs and takes (about [\w. ]+?) on 2 CPU cores", line).groups()
    return int(jobs), time, need.disk_bytes


@pytest.mark.parametrize(("config", "name"), [("smoke.yaml", "smoke"), ("config.yaml", "default")])
def test_the_readme_quotes_the_line_each_run_prints(config, name, tmp_path, monkeypatch):
    jobs, time, _ = _line(config, tmp_path, monkeypatch)
    quoted = " ".join(COSTS.split())
    assert f"{name} {time}, {jobs} jobs" in quoted, (name, time, jobs)


def test_the_readmes_estimate_of_the_papers_run_is_the_line_it_prints(tmp_path, monkeypatch):
    _, time, disk = _line("paper.yaml", tmp_path, monkeypatch)
    row = next(line for line in COSTS.splitlines() if line.startswith("| `config/paper.yaml`"))
    assert f"| {time} (estimated) |" in row and f"| about {disk / 1e9:.0f} GB (estimated) |" in row, (row, time, disk)


def test_the_configs_and_docs_describing_the_smoke_run_state_no_time_of_their_own():
    """The smoke run's time was stated four ways ("5-9 minutes", "about two minutes" in four files, ...)."""
    files = [*sorted((PROJECT / "config").glob("*.yaml")), PROJECT / ".test" / "config" / "config.yaml",
             PROJECT / "config" / "README.md", PROJECT / "docs" / "usage.md"]  # fmt: skip
    stated = []
    for path in files:
        for sentence in re.split(r"(?<=[.;:])\s", " ".join(path.read_text().split())):
            if re.search(r"smoke", sentence, re.I) and DURATION.search(sentence):
                stated.append(f"{path.relative_to(PROJECT)}: {sentence}")
    assert stated == []
