"""A second corpus beside the study's (config key ``corpora``): the same rules over ``{corpus}``, a config change."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_snakemake, write_config
from contextuality.core import layout
from workflow_runs import failure, smoke_config

MODELS = {"tiny-bert": 3, "tiny-gpt2": 4}  # layers, the input layer included
# WordNet's glosses (the wordnet_glosses rule's table, as config/wordnet-corpus.yaml reads them), their first 150
GLOSSES = {"source": "table", "path": layout.WORDNET_GLOSSES, "id_column": "id", "group_column": "kind",
           "max_sentences": 150}  # fmt: skip


def test_a_second_corpus_is_planned_through_the_same_rules():
    """Every file of a second corpus, by the rules that write the first's (``planned``: what `snakemake` builds by
    default, without starting it; the smoke run with a second corpus below plans it through Snakemake)."""
    from workflow_runs import planned

    rules = planned(smoke_config(corpora={"glosses": GLOSSES}))
    counts = {rule: len(files) for rule, files in rules.items()}
    # sts, glosses and (senses on) the usages: each model's plan and manifest per corpus
    assert counts["plan"] == counts["manifest"] == 3 * len(MODELS), counts
    assert counts["corpus"] == counts["words"] == 2 and counts["sts_pairs"] == 1, counts
    assert counts["combine_layers"] == 2 * len(MODELS) and counts["measure_senses"] == len(MODELS), counts
    assert counts["measure_layer"] == 2 * sum(MODELS.values()), counts
    assert "glosses/tiny-gpt2" in rules["combine_layers"]


@pytest.mark.slow
def test_a_smoke_run_with_a_second_corpus_beside_sts_measures_both(tmp_path):
    """Both corpora through every rule of the main study, with the smoke config's word-indexed model alone in 2
    shards (the dry run above plans both models; the sense stage has its own runs)."""
    config = smoke_config(corpora={"glosses": GLOSSES}, senses={"enabled": False})
    config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}
    config["extraction"]["n_shards"] = 2  # a corpus's shards are the shared runs' to test: half the extraction jobs
    config = write_config(tmp_path / "two-corpora.yaml", config)
    result = run_snakemake(tmp_path, "--cores", "2", configfile=config, timeout=1800)
    assert result.returncode == 0, failure(result)
    record = json.loads((tmp_path / layout.path(layout.CORPUS_RECORD, corpus="glosses")).read_text())
    assert record["source"] == "table" and record["n_sentences"] == 150
    for corpus in ("sts", "glosses"):
        layers = pd.read_csv(tmp_path / layout.path(layout.LAYERS_CSV, corpus=corpus, model="tiny-gpt2"))
        assert sorted(layers["layer"]) == list(range(MODELS["tiny-gpt2"])), corpus
        manifest = json.loads((tmp_path / layout.path(layout.MANIFEST, corpus=corpus, model="tiny-gpt2")).read_text())
        assert manifest["n_layers"] == MODELS["tiny-gpt2"]
    # the study's tables are the study corpus's: one row per model, as with STS alone
    losses = pd.read_csv(tmp_path / layout.path(layout.TABLE, name="losses", ext="csv"))
    assert list(losses["model"]) == ["tiny-gpt2"]
    again = run_snakemake(tmp_path, "-n", "--cores", "2", configfile=config)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, failure(again)
