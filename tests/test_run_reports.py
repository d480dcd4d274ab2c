"""The summary rule's job (contextuality.report.run_reports): its files read back as each model's tables; what it
writes is tested byte for byte in test_claims (test_reports_are_written_byte_for_byte_as_before)."""

from __future__ import annotations

import json

import pandas as pd

from conftest import synthetic_layers_table
from contextuality.report.run_reports import read_run_tables


def test_a_run_files_are_read_as_each_model_tables(tmp_path):
    layers = {m: synthetic_layers_table(m, [0.1, 0.2], [0.5, 0.4], [0.2, 0.1], [0.0, 0.1], [0.1, 0.1]) for m in "ab"}
    words = {m: pd.DataFrame({"word": ["dog", "cat"], "n_occurrences": [3, 4]}) for m in "ab"}
    for m in "ab":
        layers[m].to_parquet(tmp_path / f"{m}.layers.parquet")
        words[m].to_parquet(tmp_path / f"{m}.words.parquet")
        (tmp_path / f"{m}.losses.json").write_text(json.dumps({"model": m, "units": 7}))
    pd.DataFrame({"measure": ["w1"], "layer": [0]}).to_csv(tmp_path / "a.senses.csv", index=False)
    pd.DataFrame({"task": ["MEN"], "score": [0.25]}).to_csv(tmp_path / "table1.csv", index=False)
    (tmp_path / "corpus.json").write_text(json.dumps({"source": "text"}))
    files = {kind: [tmp_path / f"{m}.{kind}.parquet" for m in "ab"] for kind in ("layers", "words")}
    losses = [tmp_path / f"{m}.losses.json" for m in "ab"]
    run = read_run_tables("ab", files["layers"], files["words"], losses, [tmp_path / "a.senses.csv"],
                          [tmp_path / "table1.csv"], str(tmp_path / "corpus.json"))  # fmt: skip
    assert list(run.layers) == list(run.words) == list(run.losses) == ["a", "b"] and list(run.senses) == ["a"]
    pd.testing.assert_frame_equal(run.layers["b"], layers["b"])
    pd.testing.assert_frame_equal(run.words["a"], words["a"])
    assert run.losses["b"] == {"model": "b", "units": 7} and run.corpus == {"source": "text"}
    assert run.table1.to_dict("records") == [{"task": "MEN", "score": 0.25}]
    # no senses, no Table 1, the STS corpus: the rule's inputs are empty lists
    run = read_run_tables("ab", files["layers"], files["words"], losses, [], [], [])
    assert run.senses == {} and run.table1 is None and run.corpus is None
    assert read_run_tables("a", files["layers"], files["words"], losses, corpus=[tmp_path / "corpus.json"]).corpus
