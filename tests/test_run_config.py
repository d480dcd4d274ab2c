"""A config that leaves the default study (checks.default_comparison_line), the command's kind, and the run's
config recorded for `snakemake --report` (contextuality.workflow.targets)."""

from __future__ import annotations

import yaml

from conftest import PROJECT
from contextuality.workflow import targets
from contextuality.workflow.checks import default_comparison_line

DEFAULT = PROJECT / "config" / "config.yaml"


def _default() -> dict:
    return yaml.safe_load(DEFAULT.read_text())


def test_a_config_with_only_models_says_in_one_line_that_it_leaves_the_default_comparison():
    line = default_comparison_line({"models": _default()["models"]}, _default(), ["my.yaml"], "config/config.yaml")
    assert "\n" not in line and line.startswith("contextuality: my.yaml replaces config/config.yaml")
    assert "senses.max_lemmas: null, not 800" in line and "senses.cluster_words: 100, not 60" in line
    assert line.endswith("--configfile config/config.yaml my.yaml")


def test_no_line_for_the_default_itself_an_overlay_on_it_or_a_config_that_sets_everything():
    default = _default()
    assert default_comparison_line(default, default, [str(DEFAULT)], str(DEFAULT)) is None
    overlay = default | {"models": default["models"] | {"mine": {"source": "hub", "id": "a/b", "revision": "0" * 40}}}
    assert default_comparison_line(overlay, default, [str(DEFAULT), "mine.yaml"], str(DEFAULT)) is None
    assert default_comparison_line(default, default, [], str(DEFAULT)) is None  # no --configfile: the default
    smoke = yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text())
    assert default_comparison_line(smoke, default, ["config/smoke.yaml"], str(DEFAULT)) is None


def test_the_command_kind_as_snakemakes_parser_reads_it():
    kind = lambda *args: targets.command_kind(["snakemake", *args])  # noqa: E731
    assert kind("--cores", "2") == "run" and kind("-n") == "dry-run" and kind("--report", "r.zip") == "report"
    assert kind("--report") == "report" and kind("--dag") is None and kind("--unlock") is None
    assert targets.command_kind(["python", "x.py"]) is None
    assert targets.command_kind(["snakemake", "--target-jobs", "extract:model=m,shard=0"]) is None


def test_a_report_without_a_configfile_reads_the_last_runs_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert targets.report_config(["snakemake", "--report", "r.zip"]) is None  # no run here yet
    targets.record_run_config({"models": {"m": {"source": "random"}}})
    assert yaml.safe_load((tmp_path / targets.RUN_CONFIG).read_text()) == {"models": {"m": {"source": "random"}}}
    assert targets.report_config(["snakemake", "--report", "r.zip"]) == targets.RUN_CONFIG
    assert targets.RUN_CONFIG in capsys.readouterr().err
    assert targets.report_config(["snakemake", "--report", "--configfile", "c.yaml"]) is None
    assert targets.report_config(["snakemake", "--cores", "1"]) is None
