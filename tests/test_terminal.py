"""The terminal of a run: Snakemake's progress (the profile's logger) and the project's own lines, each no wider
than the terminal and naming the corpus it is about; the tests read Snakemake's plain lines instead."""

from __future__ import annotations

import io
import re

import pytest
import yaml

from conftest import PROJECT, plain_logger_profile
from contextuality.core import layout, runtime

LONG = "contextuality: this run stores about 5.38 MB of vectors (tiny-bert 2.50 MB, tiny-gpt2 2.88 MB), " * 4


def test_a_long_line_breaks_at_spaces_within_the_terminals_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    lines = runtime.for_terminal(LONG).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 60
    assert " ".join(LONG.split()) == " ".join(" ".join(lines).split())


def test_a_line_to_a_file_or_a_pipe_stays_one_line(monkeypatch):
    """A CI log, or the output the tests parse: no terminal, no width."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(runtime.sys, "__stderr__", io.StringIO())
    assert runtime.for_terminal(LONG) == LONG


def test_a_jobs_lines_reach_snakemakes_logger_through_the_runs_file_whole_and_in_order(tmp_path, monkeypatch):
    """Written to the terminal, a job's line landed inside the rich logger's progress display, which erased it."""
    from contextuality.workflow.terminal import TerminalRelay

    monkeypatch.delenv("COLUMNS", raising=False)
    shown = []
    relay = TerminalRelay(tmp_path / ".snakemake" / "terminal-lines-1.txt", shown.append, interval_s=3600)
    monkeypatch.setenv(runtime.TERMINAL_LINES_ENV, str(relay.path))
    runtime.to_terminal("m, corpus sts: shard 0 of 2")
    with open(relay.path, "a") as lines:
        lines.write("half a li")  # a job still writing its line
    relay.relay()
    assert shown == ["m, corpus sts: shard 0 of 2"]
    with open(relay.path, "a") as lines:
        lines.write("ne\n")
    runtime.to_terminal("m, corpus usages: shard 1 of 2")
    relay.close()
    assert shown == ["m, corpus sts: shard 0 of 2", "half a line", "m, corpus usages: shard 1 of 2"]
    assert not relay.path.exists()


def test_with_no_runs_file_a_line_goes_to_stderr(monkeypatch, capsys):
    """A job on a cluster, or called outside a run."""
    monkeypatch.delenv(runtime.TERMINAL_LINES_ENV, raising=False)
    monkeypatch.setattr(runtime.sys, "__stderr__", runtime.sys.stderr)
    runtime.to_terminal("m, corpus sts: shard 0 of 2")
    assert capsys.readouterr().err == "m, corpus sts: shard 0 of 2\n"


def test_the_terminals_lines_name_the_sense_usages_as_wordnets():
    assert layout.corpus_label("sts") == "corpus sts"
    assert layout.corpus_label(layout.USAGES_CORPUS) == "corpus usages (WordNet's sense examples)"


def test_the_profile_gives_users_the_rich_logger_and_the_tests_the_plain_one():
    profile = yaml.safe_load((PROJECT / "profiles" / "default" / "profile.yaml").read_text())
    plain = yaml.safe_load((plain_logger_profile() / "profile.yaml").read_text())
    assert profile.pop("logger") == ["rich"]
    assert plain == profile


@pytest.mark.slow
def test_the_smoke_runs_terminal_is_short_no_wider_than_the_terminal_and_names_each_corpus(smoke_run):
    """The smoke run printed 1,084 lines, up to 15,086 characters (a job's inputs: every pcs/layer_NN.txt), its
    shards of WordNet's usages read like the user's corpus, and its job count was said two ways (61 and 66)."""
    from workflow_runs import TERMINAL_COLUMNS, smoke_output

    lines = smoke_output().splitlines()
    # Snakemake's own lines that name a path (the workflow profile, before its logger starts; the run's log file)
    ours = [line for line in lines if not line.startswith(("Using workflow specific profile", "Complete Log: "))]
    longest = max(ours, key=len)
    assert len(longest) <= TERMINAL_COLUMNS, longest
    assert len(lines) <= 150, len(lines)
    said = " ".join(smoke_output().split())  # the project's lines break at the terminal's width
    planned = re.search(r"has about (\d+) jobs", said).group(1)
    assert re.search(r"Job stats .*? total (\d+) ", said).group(1) == planned  # the logger's table, the same run
    named = set(re.findall(r"^tiny-\w+, (corpus .*?): shard \d+ of \d+ ", smoke_output(), re.M))
    assert named == {layout.corpus_label("sts"), layout.corpus_label(layout.USAGES_CORPUS)}, smoke_output()
