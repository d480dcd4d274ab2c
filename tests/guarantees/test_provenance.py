"""Guarantee: every shard, layer file and per-layer record says what made it, and every reader checks it.

* a shard extracted with another setting (here another pooling), put in place of one shard, stops the
  run at the manifest with one line naming the shard and the setting;
* a layer file is read only through its own virtual dataset's mapping, and only from the manifest's shards;
* a layer file whose provenance differs from the manifest's is refused;
* a per-layer record measured against another manifest is not combined.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import measure_settings, run_snakemake
from contextuality.measure.layer_job import measure_layer
from contextuality.store.files import StoreError
from contextuality.store.reader import read_layer, read_manifest
from workflow_runs import failure, smoke_config_path

pytestmark = pytest.mark.slow

MODEL = "tiny-gpt2"  # 4 shards, pooling 'last' (config/smoke.yaml)
EMBEDDINGS = Path("results") / "embeddings" / "sts" / MODEL
METRICS_TARGET = f"results/metrics/sts/{MODEL}/layers.csv"
MANIFEST_LOG = Path("logs") / "manifest" / "sts" / f"{MODEL}.log"


@pytest.fixture
def scratch(smoke_run, tmp_path) -> Path:
    """A copy of the finished smoke run (times kept) that a test may change."""
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    return workdir


def _extract_shard_with_pooling(workdir: Path, shard: int, pooling: str, out: Path) -> None:
    """What the extract job does for ``shard`` of the smoke run's model, but with another ``pooling``."""
    from contextuality.extraction.extract import run_extraction_job
    from contextuality.workflow.schema import load_settings

    settings = load_settings(yaml.safe_load(smoke_config_path().read_text()))
    shard_settings = dataclasses.replace(settings.shard(MODEL), pooling=pooling)
    model_root = workdir / "resources" / "models" / MODEL
    run_extraction_job(
        model_key=MODEL, corpus="sts", settings=shard_settings, record_path=model_root / "source.json",
        model_dir=model_root / "model",
        tokens_path=workdir / EMBEDDINGS / "tokens.parquet", units_path=workdir / EMBEDDINGS / "units.parquet",
        shard=shard, out_h5=out, threads=1, disk_factor=1.0, gpus=0, seed=settings.seed,
    )  # fmt: skip


def test_a_shard_made_with_another_pooling_stops_the_run_at_the_manifest(scratch, tmp_path):
    other = tmp_path / "shard_1.h5"
    _extract_shard_with_pooling(scratch, 1, "first", other)
    shard = EMBEDDINGS / "shards" / "shard_1.h5"
    with h5py.File(other) as made, h5py.File(scratch / shard) as kept:  # really another pooling: other vectors
        assert made["layer_02"].shape == kept["layer_02"].shape
        assert not np.array_equal(made["layer_02"][()], kept["layer_02"][()])
    shutil.copy(other, scratch / shard)  # the only change: newer than what was gathered from it
    result = run_snakemake(scratch, METRICS_TARGET, "--cores", "2", configfile=smoke_config_path())
    assert result.returncode != 0, failure(result)
    line = f"{shard}: pooling is 'first', but the config (shard setting pooling) has 'last'"
    assert line in result.stderr, failure(result)
    assert line in (scratch / MANIFEST_LOG).read_text()
    assert "Traceback" not in (scratch / MANIFEST_LOG).read_text()
    assert not (scratch / EMBEDDINGS / "manifest.json").exists()  # the failed job's output, removed


def _remap(layer_file: Path, shard_index: int, replacement: str) -> None:
    """Rewrite ``layer_file``'s virtual dataset so that one shard's rows map ``replacement`` instead,
    leaving every other attribute (``sources`` included, where a version writes it) as it was."""
    with h5py.File(layer_file) as handle:
        dataset = handle["vectors"]
        shape, dtype, attrs = dataset.shape, dataset.dtype, dict(handle.attrs)
        mapping = [(m.file_name, m.dset_name) for m in dataset.virtual_sources()]
        plist = dataset.id.get_create_plist()
        blocks = []
        for j in range(plist.get_virtual_count()):
            (first, _), (last, _) = plist.get_virtual_vspace(j).get_select_bounds()
            blocks.append((first, last + 1))
        datasets = {name: handle[name][()] for name in ("sentence_offsets", "sentence_ids")}
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    for j, ((file, name), (first, stop)) in enumerate(zip(mapping, blocks)):
        source = replacement if j == shard_index else file
        layout[first:stop] = h5py.VirtualSource(source, name, shape=(stop - first, shape[1]))
    layer_file.unlink()
    with h5py.File(layer_file, "w") as handle:
        handle.create_virtual_dataset("vectors", layout, fillvalue=np.nan)
        for name, data in datasets.items():
            handle.create_dataset(name, data=data)
        handle.attrs.update(attrs)


def _measure(workdir: Path, layer: int):
    embeddings = workdir / EMBEDDINGS
    return measure_layer(
        embeddings / "layers" / f"layer_{layer:02d}.h5", layer, pd.read_parquet(embeddings / "occurrences.parquet"),
        measure_settings(intra_sentences=20, baseline_samples=20, bootstrap_resamples=10), model=MODEL,
        manifest=read_manifest(embeddings / "manifest.json"),
    )  # fmt: skip


def _foreign_shard(scratch: Path, tmp_path: Path) -> Path:
    """Another run's folder holding a shard of the same name, shape and provenance, with other vectors."""
    elsewhere = tmp_path / "elsewhere" / "shards"
    elsewhere.mkdir(parents=True)
    foreign = elsewhere / "shard_1.h5"
    shutil.copy(scratch / EMBEDDINGS / "shards" / "shard_1.h5", foreign)
    with h5py.File(foreign, "a") as handle:
        handle["layer_02"][...] = np.ones(handle["layer_02"].shape, handle["layer_02"].dtype)
    return foreign


def test_a_layer_file_is_read_through_its_own_virtual_dataset(scratch, tmp_path):
    """What the reader returns is what the file's mapping says (as plain h5py reads it), whatever else it records."""
    layer_file = scratch / EMBEDDINGS / "layers" / "layer_02.h5"
    before = read_layer(layer_file)[0]
    _remap(layer_file, 1, os.path.relpath(_foreign_shard(scratch, tmp_path), layer_file.parent))
    with h5py.File(layer_file) as handle:
        mapped = handle["vectors"][()]
    assert not np.array_equal(mapped, before)
    np.testing.assert_array_equal(read_layer(layer_file)[0], mapped)


def test_a_layer_file_mapping_a_file_outside_the_models_shards_is_refused(scratch, tmp_path):
    layer_file = scratch / EMBEDDINGS / "layers" / "layer_02.h5"
    _remap(layer_file, 1, os.path.relpath(_foreign_shard(scratch, tmp_path), layer_file.parent))
    with pytest.raises(
        StoreError,
        match=r"layer_02\.h5: its virtual dataset maps .*elsewhere/shards/shard_1\.h5, "
        r"which is not one of the model's shards listed in .*manifest\.json",
    ):
        _measure(scratch, 2)


def test_a_layer_file_whose_provenance_differs_from_the_manifest_is_refused(scratch):
    layer_file = scratch / EMBEDDINGS / "layers" / "layer_01.h5"
    manifest = json.loads((scratch / EMBEDDINGS / "manifest.json").read_text())
    recorded = {**manifest.get("provenance", {}), "pooling": "first"}
    with h5py.File(layer_file, "a") as handle:
        handle.attrs["provenance"] = json.dumps(recorded, sort_keys=True)
    with pytest.raises(StoreError, match=r"layer_01\.h5: pooling is 'first', but .*manifest\.json has 'last'"):
        _measure(scratch, 1)


def test_a_per_layer_record_of_another_manifest_is_not_combined(scratch):
    record = scratch / "results" / "metrics" / "sts" / MODEL / "per_layer" / "layer_01.json"
    other = hashlib.sha256(b"another manifest's provenance").hexdigest()
    content = json.loads(record.read_text())
    content["provenance_sha256"] = other  # as a record measured against another manifest carries
    record.write_text(json.dumps(content, indent=1) + "\n")
    result = run_snakemake(scratch, METRICS_TARGET, "--cores", "1", configfile=smoke_config_path())
    assert result.returncode != 0, failure(result)
    log = (scratch / "logs" / "combine_layers" / "sts" / f"{MODEL}.log").read_text()
    assert f"per_layer/layer_01.json: provenance_sha256 is '{other}', but the manifest has" in log
    assert "Traceback" not in log


def test_the_classic_export_checks_its_layer_files_against_the_manifest(scratch, tmp_path):
    from contextuality.store.export import export_classic

    embeddings = scratch / EMBEDDINGS
    layer_files = sorted((embeddings / "layers").glob("layer_*.h5"))
    _remap(layer_files[2], 1, os.path.relpath(_foreign_shard(scratch, tmp_path), layer_files[2].parent))
    with pytest.raises(
        StoreError,
        match=r"layer_02\.h5: its virtual dataset maps .*elsewhere/shards/shard_1\.h5, "
        r"which is not one of the model's shards",
    ):
        export_classic(
            layer_files,
            pd.read_parquet(embeddings / "occurrences.parquet"),
            tmp_path / "classic.h5",
            tmp_path / "word2sent.json",
            manifest=read_manifest(embeddings / "manifest.json"),
        )
    assert not (tmp_path / "classic.h5").exists()


def test_the_manifest_wants_shards_0_to_n_minus_1_of_n(smoke_run, tmp_path):
    from contextuality.store.views import write_manifest

    embeddings = smoke_run / EMBEDDINGS
    recorded = read_manifest(embeddings / "manifest.json")["provenance"]
    shards = [embeddings / "shards" / f"shard_{shard}.h5" for shard in (0, 1, 1, 3)]  # shard 1 standing as shard 2
    with pytest.raises(
        StoreError, match=r"shard_1\.h5: records shard 1 of 4, but it stands as shard 2 of the 4 shard files given"
    ):
        write_manifest(shards, embeddings / "units.parquet", tmp_path / "manifest.json", expected=recorded)
    with pytest.raises(
        StoreError, match=r"shard_0\.h5: records shard 0 of 4, but it stands as shard 0 of the 3 shard files given"
    ):
        write_manifest(
            shards[:2] + shards[3:], embeddings / "units.parquet", tmp_path / "manifest.json", expected=recorded
        )
    assert not (tmp_path / "manifest.json").exists()
