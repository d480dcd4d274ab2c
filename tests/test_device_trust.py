"""The device path (rule measure_model) on the paths users take: a stateful ELMo's passes, a part made with other
settings, a changed part count, a damaged part, settings that change no number, a job killed near its end."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd

from conftest import PROJECT, materialise
from contextuality.core.archive import unpacked
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


_KILLED_UNPACK = """
import sys, tarfile, time
from pathlib import Path
from contextuality.core.archive import unpacked

def stalled(self, path, *args, **kwargs):  # a model's first file written, then killed before the rest
    (Path(path) / "config.json").write_text("{}")
    Path(sys.argv[2]).write_text("unpacking")
    time.sleep(600)

tarfile.TarFile.extractall = stalled
unpacked(sys.argv[1])
"""


def test_a_model_copy_left_by_a_job_killed_while_unpacking_is_swept(tmp_path):
    """kill -9 during a model's unpack left its partial copy beside model.tar, never swept (a model's size each)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from contextuality.core.archive import pack

    folder = tmp_path / "m" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "weights.bin").write_bytes(b"w" * 1000)
    archive = pack(folder, tmp_path / "m" / "model.tar")
    shutil.rmtree(folder)
    started = tmp_path / "started"
    job = subprocess.Popen([sys.executable, "-c", _KILLED_UNPACK, str(archive), str(started)],
                           env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(PROJECT / "src"))})  # fmt: skip
    for _ in range(600):
        if started.exists() or job.poll() is not None:
            break
        time.sleep(0.1)
    assert started.exists(), "the unpacking job did not start"
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert len(list(archive.parent.glob(".model.tmp-*"))) == 1  # the killed job's partial copy
    assert unpacked(archive) == folder and (folder / "weights.bin").read_bytes() == b"w" * 1000
    assert not list(archive.parent.glob(".model.tmp-*")), list(archive.parent.iterdir())
