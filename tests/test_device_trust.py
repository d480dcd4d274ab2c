"""The device path (rule measure_model) on the paths users take: a stateful ELMo's passes, a part made with other
settings, a changed part count, a damaged part, settings that change no number, a job killed near its end."""

from __future__ import annotations

import numpy as np
import pandas as pd

from conftest import PROJECT, materialise
from contextuality.extraction.extract import load_for_extraction
from contextuality.measure import device_job
from contextuality.models.sources import write_source_record
from contextuality.workflow.schema import load_settings

ELMO = PROJECT / "tests" / "data" / "elmo-golden"
SENTENCES = ["The dog runs .", "A cat sleeps on the mat, and the dog runs!", "Dogs run.", "The mat is red .",
             "A dog and a cat run on the red mat ."]  # fmt: skip


def test_a_stateful_elmo_in_several_groups_equals_one_group(tmp_path):
    """Every pass starts from the state extraction's starts from (zero): the layers of a later group are those of
    a one-pass run, to float rounding."""
    import torch

    from contextuality.corpus.words import word_table
    from contextuality.extraction.plan import plan_model

    spec = {"source": "elmo", "options": str(ELMO / "options.json"), "weights": str(ELMO / "lm_weights.hdf5"),
            "stateful": True, "batch_size": 2}  # fmt: skip
    record = materialise("elmo", spec, tmp_path / "elmo")
    write_source_record(record, tmp_path / "elmo" / "source.json")
    shard = load_settings({"models": {"elmo": spec}}).shard("elmo")
    loaded = load_for_extraction("elmo", shard, record, tmp_path / "elmo" / "model", "cpu")
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    plan = plan_model(loaded, sentences, word_table(sentences), indexing="word", tokenization="natural",
                      policy="truncate")  # fmt: skip
    shape = (len(plan.units), loaded.dim)

    def passes(groups):
        rows = {}
        for group in groups:
            resident = torch.empty((len(group), *shape), dtype=torch.float32)
            device_job.fill_group(loaded, plan, group, resident, shard, "cpu", desc="test")
            rows.update({layer: resident[slot].numpy().copy() for slot, layer in enumerate(group)})
        return rows

    one = passes([[0, 1, 2]])
    several = passes([[0], [1], [2]])
    for layer in range(3):
        np.testing.assert_allclose(several[layer], one[layer], atol=1e-6, rtol=0, err_msg=f"layer {layer}")
