"""Guarantee: a crash costs only the unfinished shard(s), and a damaged file is detected, not read.

The whole run (Snakemake and its job) is killed with SIGKILL while an extraction job is in the middle
of a shard; ``snakemake --unlock`` then ``--rerun-incomplete`` recomputes the unfinished shards only and
ends with the same HDF5 content as the uninterrupted smoke run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from conftest import run_snakemake
from contextuality.store.files import StoreError, open_complete
from contextuality.store.reader import read_layer
from contextuality.store.views import write_manifest
from workflow_runs import KILLED_MODEL, failure

pytestmark = pytest.mark.slow

MODEL = KILLED_MODEL
EMBEDDINGS = f"results/embeddings/sts/{MODEL}"
TARGET = f"{EMBEDDINGS}/manifest.json"
N_SHARDS = 4  # config/smoke.yaml


def test_sigkill_mid_shard_then_rerun_incomplete_recomputes_only_unfinished_shards(interrupted_smoke_run):
    run = interrupted_smoke_run
    # the STS corpus's shard jobs (the usages' shards are the same rule's, with corpus=usages)
    jobs = re.split(r"\n(?:local)?rule ", run["rerun"])
    recomputed = {
        int(shard)
        for job in jobs
        if job.startswith("extract:")
        for shard in re.findall(rf"wildcards: corpus=sts, model={MODEL}, shard=(\d+)", job)
    }
    assert recomputed == set(range(N_SHARDS)) - run["finished"], run["rerun"]
    assert run["half_written"] and run["half_written"] <= recomputed
    assert run["leftovers"], "the kill left no half-written shard: it did not happen mid-shard"
    for shard in run["finished"]:  # finished shards untouched: same file (inode) and time
        name = f"shard_{shard}.h5"
        assert run["after"][name] == run["before"][name], name
    shards = run["workdir"] / EMBEDDINGS / "shards"
    assert not list(shards.glob(".*.tmp-*")), "the rerun left the killed job's temporary file behind"


def test_resumed_run_stores_the_same_vectors_as_an_uninterrupted_run(interrupted_smoke_run):
    run = interrupted_smoke_run
    resumed = run["workdir"] / EMBEDDINGS
    reference = run["reference"] / EMBEDDINGS
    names = sorted(path.name for path in (reference / "layers").glob("layer_*.h5"))
    assert names and names == sorted(path.name for path in (resumed / "layers").glob("layer_*.h5"))
    for name in names:
        np.testing.assert_array_equal(
            read_layer(resumed / "layers" / name)[0], read_layer(reference / "layers" / name)[0]
        )
        with open_complete(resumed / "layers" / name) as got, open_complete(reference / "layers" / name) as want:
            for dataset in ("vectors", "sentence_offsets", "sentence_ids"):
                np.testing.assert_array_equal(got[dataset][:], want[dataset][:])
            assert dict(got.attrs) == dict(want.attrs) or _same_attrs(got.attrs, want.attrs)
    pd.testing.assert_frame_equal(
        pd.read_parquet(resumed / "units.parquet"), pd.read_parquet(reference / "units.parquet")
    )


def _same_attrs(a, b) -> bool:
    assert sorted(a) == sorted(b)
    for key in a:
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
    return True


# --------------------------------------------------------------------------------------------------
# Damaged files


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_shard_left_by_hand_is_detected_not_read(interrupted_smoke_run, tmp_path):
    embeddings = interrupted_smoke_run["workdir"] / EMBEDDINGS
    copies = []
    for shard in range(N_SHARDS):
        copy = tmp_path / f"shard_{shard}.h5"
        copy.write_bytes((embeddings / "shards" / copy.name).read_bytes())
        copies.append(copy)
    _truncate(copies[1])
    with pytest.raises(StoreError, match=r"shard_1\.h5: not a readable HDF5 file .*; delete it and rerun snakemake"):
        write_manifest(copies, embeddings / "units.parquet", tmp_path / "manifest.json")
    assert not (tmp_path / "manifest.json").exists()


def test_hdf5_without_completion_marker_is_detected_not_read(interrupted_smoke_run, tmp_path):
    reference = interrupted_smoke_run["workdir"] / EMBEDDINGS / "layers" / "layer_01.h5"
    unmarked = tmp_path / "layers" / "layer_01.h5"
    unmarked.parent.mkdir()
    unmarked.write_bytes(reference.read_bytes())
    with h5py.File(unmarked, "a") as handle:  # as a writer killed before its last step would leave it
        del handle.attrs["complete"]
    with pytest.raises(
        StoreError, match=r"layer_01\.h5: incomplete \(no 'complete' marker\); delete it and rerun snakemake"
    ):
        open_complete(unmarked)
    with pytest.raises(StoreError, match=r"layer_01\.h5: incomplete"):
        read_layer(unmarked)
    _truncate(unmarked)
    with pytest.raises(StoreError, match=r"layer_01\.h5: not a readable HDF5 file .*; delete it and rerun snakemake"):
        read_layer(unmarked)


def test_truncated_shard_in_a_run_stops_the_manifest_naming_the_file(interrupted_smoke_run, tmp_path):
    run = interrupted_smoke_run
    workdir = tmp_path / "copy"
    shutil.copytree(run["workdir"], workdir, symlinks=True)  # the shared run stays intact for other tests
    shard = Path(EMBEDDINGS) / "shards" / "shard_2.h5"
    _truncate(workdir / shard)  # newer than the gathered layers: Snakemake gathers again
    result = run_snakemake(workdir, TARGET, "--cores", "2", configfile=run["config"])
    assert result.returncode != 0, failure(result)
    log = (workdir / "logs" / "manifest" / "sts" / f"{MODEL}.log").read_text()
    assert f"{shard}: not a readable HDF5 file" in log and "Traceback" not in log
    assert not (workdir / TARGET).exists()  # removed by Snakemake as the failed job's output
