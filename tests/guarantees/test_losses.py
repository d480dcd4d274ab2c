"""Guarantee: what a model cannot store is counted and shown, and a model that would store nothing to
measure stops the run before any extraction, with one line naming the settings."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_snakemake, write_config
from workflow_runs import smoke_config, smoke_output

pytestmark = pytest.mark.slow


def test_truncation_losses_are_counted_and_shown_in_tables_reports_and_the_runs_output(smoke_run):
    """The smoke config cuts tiny-gpt2's longest sentences (``max_length: 88``): the shared smoke run shows the losses."""
    workdir = smoke_run
    losses = json.loads((workdir / "results/embeddings/sts/tiny-gpt2/losses.json").read_text())
    lost = losses["indexed_occurrences_lost"]
    assert losses["sentences_truncated"] > 0 and lost["truncated"] > 0 and losses["sentences_skipped"] == 0
    # the words' own index and the occurrences measured differ by exactly what was lost
    index = pd.read_parquet(workdir / "results/corpora/sts/word_index.parquet")
    units = pd.read_parquet(workdir / "results/embeddings/sts/tiny-gpt2/units.parquet")
    stored = index.merge(
        units.rename(columns={"word_position": "position", "position": "unit_position"}), on=["sentence_id", "position"]
    )
    assert losses["indexed_occurrences"] == len(index)
    assert len(index) - len(stored) == sum(lost.values())
    assert (
        f"WARNING model tiny-gpt2: {losses['sentences_truncated']} sentences truncated; 0 skipped; " in smoke_output()
    )
    for table in ("summary.md", "claims.md"):
        text = (workdir / "results" / "tables" / table).read_text()
        assert "## What could not be stored" in text
        row = next(line for line in text.splitlines() if line.startswith("| tiny random GPT-2 (`tiny-gpt2`) | "))
        assert row.split(" | ")[1:5] == [
            str(losses["sentences_truncated"]),
            "0",
            str(losses["indexed_occurrences"]),
            str(lost["truncated"]),
        ]
    table = pd.read_csv(workdir / "results/tables/losses.csv").set_index("model")
    assert table.loc["tiny-gpt2", "lost_truncated"] == lost["truncated"]
    assert table.loc["tiny-bert", "sentences_truncated"] == 0  # the model without a limit loses nothing


def test_a_model_with_nothing_to_measure_stops_before_any_extraction(tmp_path):
    """[CLS] and [SEP] fill both places of max_length 2: no word is stored. (An empty word index stops the
    run earlier, at the words rule: ``test_config``'s nothing-to-measure cases.)"""
    # one model: it stops the run as it would beside another; senses off: WordNet's jobs, first in line, would
    # run to their end beside the plan that stops
    config = smoke_config(senses={"enabled": False})
    config["models"] = {"tiny-bert": {**config["models"]["tiny-bert"], "max_length": 2}}
    result = run_snakemake(tmp_path, "--cores", "2", configfile=write_config(tmp_path / "c.yaml", config))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    expected = "model 'tiny-bert': only 0 indexed word(s) would be stored, and the measurements need at least 2; "
    assert expected in output, output
    first_error = next(line for line in output.splitlines() if "only 0 indexed" in line)
    assert output.index(first_error) < output.index("Error in rule")  # the line comes first, not after a traceback
    assert "models.tiny-bert.max_length: 2" in first_error and "extraction.max_length_policy: truncate" in first_error
    assert not list((tmp_path / "results").rglob("shard_*.h5")), "extraction ran"
