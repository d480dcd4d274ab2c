"""Guarantee: the per-layer store is known to the workflow, stored once, and checked on every read.

* every layer file is a declared output: deleting one plans exactly its rebuild and what depends on it;
* the vectors are stored once (the shards); a layer file is a small virtual view over them;
* a flipped byte in a stored vector fails the reading job, naming the damaged file and the way out;
* a deleted shard is re-extracted (and nothing else), never read as zeros or fill values;
* a layer that does not match the manifest (missing, other rows or dims) stops the measurement;
* a model's label (or the paper model it stands for) is no job's input but the reporting rules' (test_params).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import PROJECT, job_counts, run_snakemake, write_config
from contextuality.measure.combine import combine_layers
from contextuality.measure.layer_result import LayerResult, LayerShape
from contextuality.store.files import StoreError
from contextuality.store.reader import check_layer, read_layer, read_manifest
from workflow_runs import failure, smoke_config_path

pytestmark = pytest.mark.slow

MODEL = "tiny-gpt2"  # 3 hidden layers + the input layer, indexing by word
EMBEDDINGS = Path("results") / "embeddings" / "sts" / MODEL
# the model's measurements, what the rebuild tests compare (what is drawn from them: the dry runs' concern)
METRICS_TARGET = f"results/metrics/sts/{MODEL}/layers.csv"


@pytest.fixture
def scratch(smoke_run, tmp_path) -> Path:
    """A copy of the finished smoke run (times kept) that a test may damage."""
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    return workdir


def _dry_run(workdir: Path, *args: str, config: Path | None = None) -> tuple[dict[str, int], str]:
    result = run_snakemake(workdir, "-n", "--cores", "2", *args, configfile=config or smoke_config_path())
    assert result.returncode == 0, failure(result)
    counts = job_counts(result.stdout)
    counts.pop("total", None)
    return counts, result.stdout


def _planned_layers(output: str, rule: str) -> set[str]:
    """The ``layer`` wildcard of every planned job of ``rule`` (from the dry run's job listing)."""
    layers = set()
    for block in output.split("\n\n"):
        if re.search(rf"^(local)?rule {rule}:", block, flags=re.M):
            match = re.search(r"wildcards: .*layer=(\d+)", block)
            layers.add(match.group(1) if match else "")
    return layers


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_finished_run_has_nothing_to_do(smoke_run):
    counts, output = _dry_run(smoke_run)
    assert counts == {}, output


def test_deleting_one_layer_file_plans_exactly_its_rebuild_and_what_depends_on_it(scratch):
    (scratch / EMBEDDINGS / "layers" / "layer_02.h5").unlink()
    counts, output = _dry_run(scratch)
    assert counts == {
        "layer_file": 1,
        "measure_layer": 1,
        "combine_layers": 1,
        "static_scores": 1,
        "measure_senses": 1,
        "figures": 1,
        "model_figures": 1,
        "senses_figures": 1,
        "summary": 1,
        "table1": 1,
        "model_pages": 1,
        "report_pages": 1,
        "similarity_sample": 1,  # the model's sample is gathered from every layer file: again, then its tables
        "similarity_model": 1,
        "similarity_pair": 1,
        "similarity_figures": 1,
        "atlas": 1,
        "all": 1,
    }, output
    assert _planned_layers(output, "layer_file") == {"02"} and _planned_layers(output, "measure_layer") == {"02"}
    assert f"model={MODEL}" in output and "model=tiny-bert" not in output


def _flip_bytes(path: Path, dataset: str, chunk: int = 0, count: int = 16) -> None:
    """XOR ``count`` bytes in the middle of one stored chunk of ``dataset`` (as a failing disk would)."""
    with h5py.File(path) as handle:
        info = handle[dataset].id.get_chunk_info(chunk)
    data = bytearray(path.read_bytes())
    middle = info.byte_offset + info.size // 2
    for offset in range(middle, middle + count):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_stored_vector_fails_the_reading_job_naming_the_file(scratch):
    shard = EMBEDDINGS / "shards" / "shard_1.h5"
    _flip_bytes(scratch / shard, "layer_02")
    with pytest.raises(StoreError, match=rf"{re.escape(str(scratch / shard))}: dataset layer_02 fails its checksum"):
        read_layer(scratch / EMBEDDINGS / "layers" / "layer_02.h5")
    # the job that reads the layer (forced: its output is up to date), not every layer's
    target = f"results/metrics/sts/{MODEL}/per_layer/layer_02.json"
    result = run_snakemake(
        scratch, target, "--cores", "1", "--forcerun", "measure_layer", configfile=smoke_config_path()
    )
    assert result.returncode != 0, failure(result)
    log = (scratch / "logs" / "measure_layer" / "sts" / MODEL / "layer_02.log").read_text()
    assert f"{shard}: dataset layer_02 fails its checksum or cannot be read" in log and "Traceback" not in log
    assert (
        "the file is damaged; delete it and rerun snakemake, which rebuilds it and everything that depends on it" in log
    )


def test_a_flipped_byte_in_the_sentence_offsets_is_caught_too(scratch):
    layer_file = scratch / EMBEDDINGS / "layers" / "layer_01.h5"
    _flip_bytes(layer_file, "sentence_offsets", count=4)
    with pytest.raises(StoreError, match="dataset sentence_offsets fails its checksum"):
        read_layer(layer_file)


def test_a_deleted_shard_is_never_read_and_only_it_is_extracted_again(scratch):
    """And every layer file, one of them deleted too, is rebuilt and measured again: the rebuilt tables are
    byte-identical to the first run's. (One real run for both: deleting a shard rebuilds every layer file.)

    The run names the deleted files beside the model's table: asked for the table alone, Snakemake finds it up to
    date and rebuilds nothing (a missing file upstream of an existing output is not a reason to run), so the
    comparison held without a rebuild (as it did in this test and the one on a deleted layer file before)."""
    shard = scratch / EMBEDDINGS / "shards" / "shard_1.h5"
    shard.unlink()
    # a reader that bypasses the workflow gets a clear error, not the virtual dataset's fill values
    with pytest.raises(
        StoreError, match=r"layer_00\.h5: its vectors live in .*shard_1\.h5, which is missing; rerun snakemake"
    ):
        read_layer(scratch / EMBEDDINGS / "layers" / "layer_00.h5")
    (scratch / EMBEDDINGS / "layers" / "layer_02.h5").unlink()
    counts, output = _dry_run(scratch)
    assert counts["extract"] == 1 and "shard=1" in output
    assert counts["layer_file"] == 4 and counts["measure_layer"] == 4 and counts["manifest"] == 1
    before = _digests(scratch / "results" / "metrics" / "sts" / MODEL)
    assert len(before) > 5, before  # the model's tables are there to compare (an empty folder compares equal)
    deleted = [str(EMBEDDINGS / "shards" / "shard_1.h5"), str(EMBEDDINGS / "layers" / "layer_02.h5")]
    result = run_snakemake(scratch, *deleted, METRICS_TARGET, "--cores", "2", configfile=smoke_config_path())
    assert result.returncode == 0, failure(result)
    ran = {rule: count for rule, count in job_counts(result.stdout + result.stderr).items() if rule != "total"}
    assert ran == {"extract": 1, "manifest": 1, "layer_file": 4, "measure_layer": 4, "combine_layers": 1}, failure(
        result
    )
    assert all((scratch / name).is_file() for name in deleted)
    assert _digests(scratch / "results" / "metrics" / "sts" / MODEL) == before


def test_a_layer_file_that_is_not_the_manifests_layer_stops_its_measurement(scratch):
    layers = scratch / EMBEDDINGS / "layers"
    shutil.copy2(layers / "layer_01.h5", layers / "layer_02.h5")  # newer than its inputs: Snakemake trusts it
    target = f"results/metrics/sts/{MODEL}/per_layer/layer_02.json"
    result = run_snakemake(scratch, target, "--cores", "1", "--force", configfile=smoke_config_path())
    assert result.returncode != 0, failure(result)
    log = (scratch / "logs" / "measure_layer" / "sts" / MODEL / "layer_02.log").read_text()
    assert "layer_02.h5: holds layer 1 with" in log and "but the manifest expects layer 2" in log


def test_measuring_a_layer_set_that_misses_a_layer_stops_naming_it(smoke_run):
    manifest = read_manifest(smoke_run / EMBEDDINGS / "manifest.json")
    shape = {"rows": manifest["rows"], "dim": manifest["dim"]}
    results = [
        LayerResult({"layer": layer}, pd.DataFrame(), None, [], np.empty(0), LayerShape(**shape)) for layer in (0, 1, 3)
    ]
    with pytest.raises(
        StoreError,
        match=r"manifest\.json: the model has layers 0-3 of \d+ rows x 32 dims, but layers \[2\] are missing",
    ):
        combine_layers(
            results, Path("w"), Path("l"), Path("c"), top_k=20, manifest=manifest, manifest_path="manifest.json"
        )
    shapes = {layer: LayerShape(**{**shape, "rows": shape["rows"] - 1} if layer == 1 else shape) for layer in range(4)}
    results = [
        LayerResult({"layer": layer}, pd.DataFrame(), None, [], np.empty(0), shapes[layer]) for layer in range(4)
    ]
    with pytest.raises(StoreError, match=r"layer 1 was measured on \d+ rows x 32 dims"):
        combine_layers(results, Path("w"), Path("l"), Path("c"), top_k=20, manifest=manifest)
    with pytest.raises(StoreError, match="layer 4 is out of range; the manifest lists layers 0-3"):
        check_layer(smoke_run / EMBEDDINGS / "layers" / "layer_03.h5", manifest, 4)


def test_the_vectors_are_stored_once(smoke_run):
    """Shards hold rows x layers x dim x dtype bytes (+ chunk checksums); layer files are a few kB each."""
    for model in ("tiny-bert", "tiny-gpt2"):
        folder = smoke_run / "results" / "embeddings" / "sts" / model
        manifest = read_manifest(folder / "manifest.json")
        vector_bytes = manifest["rows"] * manifest["n_layers"] * manifest["dim"] * np.dtype(manifest["dtype"]).itemsize
        files = sorted(folder.rglob("*.h5"))
        metadata_allowance = 16_384 * len(files)  # HDF5 headers, B-trees, offsets, attributes
        on_disk = sum(path.stat().st_size for path in files)
        assert on_disk <= 1.05 * vector_bytes + metadata_allowance, (model, on_disk, vector_bytes)
        for layer_file in (folder / "layers").glob("layer_*.h5"):
            assert layer_file.stat().st_size < 32_768
            with h5py.File(layer_file) as handle:
                assert handle["vectors"].is_virtual


def _h5_equal(a: Path, b: Path) -> None:
    with h5py.File(a) as fa, h5py.File(b) as fb:
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
        assert names_a == names_b, a
        for name in names_a:
            if isinstance(fa[name], h5py.Dataset):
                np.testing.assert_array_equal(fa[name][()], fb[name][()], err_msg=f"{a}: {name}")
        assert sorted(fa.attrs) == sorted(fb.attrs), a
        for key in fa.attrs:
            assert np.array_equal(np.asarray(fa.attrs[key]), np.asarray(fb.attrs[key])), (a, key)


def test_a_run_without_a_shared_filesystem_equals_a_local_run(smoke_run, tmp_path):
    """Kubernetes-style: no shared file system, every input and output through a storage provider.

    Each job gets only its declared inputs, copied in from the storage (the `fs` plugin, rsync), and
    its outputs are copied back: the model folder, the shards behind each layer file, everything.
    """
    storage, scratch, workdir = tmp_path / "storage", tmp_path / "local-copies", tmp_path / "run"
    workdir.mkdir()
    for folder in ("sts", "benchmarks"):  # the inputs a bucket would hold
        shutil.copytree(PROJECT / "resources" / folder, storage / "resources" / folder)
    config = yaml.safe_load(smoke_config_path().read_text())
    config["corpus"]["bundled_dir"] = "resources/sts"
    config["static"]["benchmark_dir"] = "resources/benchmarks"
    config["models"] = {MODEL: config["models"][MODEL]}  # one model: every rule runs, in half the jobs
    result = run_snakemake(
        workdir,
        "--cores",
        "2",
        "--shared-fs-usage",
        "none",
        "--default-storage-provider",
        "fs",
        "--default-storage-prefix",
        str(storage),
        "--local-storage-prefix",
        str(scratch),
        configfile=write_config(tmp_path / "storage.yaml", config),
        timeout=1800,
    )
    assert result.returncode == 0, failure(result)
    assert not (workdir / "results").exists() and not (workdir / "resources").exists()  # all went to the storage
    # the model's own files equal the shared local run's (the tables across models hold one model here)
    model_files = [Path("results") / part / MODEL for part in ("embeddings/sts", "metrics/sts", "static")] + [
        Path("results/corpora")
    ]
    local = {p.relative_to(smoke_run) for folder in model_files for p in (smoke_run / folder).rglob("*") if p.is_file()}
    remote = {p.relative_to(storage) for folder in model_files for p in (storage / folder).rglob("*") if p.is_file()}
    assert remote == local
    compared = 0
    for relative in sorted(local):
        if relative.suffix in (".png", ".pdf"):
            continue  # matplotlib output need only exist
        if relative.suffix == ".h5":
            _h5_equal(smoke_run / relative, storage / relative)
        else:
            assert (smoke_run / relative).read_bytes() == (storage / relative).read_bytes(), relative
        compared += 1
    assert compared > 30
    # each heavy job's timings went to the storage too (Snakemake's benchmark files): of the STS corpus 4 shards,
    # 4 layers, the sense job, the plan, manifest and combining jobs, the similarity sample and the model's similarity
    # table; of the usages' corpus 4 shards, plan, manifest
    benchmarks = storage / "results" / "benchmarks"
    assert len(list((benchmarks / "sts" / MODEL).glob("*.tsv"))) == 4 + 4 + 1 + 3 + 2
    assert len(list((benchmarks / "usages" / MODEL).glob("*.tsv"))) == 4 + 2
    for name in ("summary.md", "claims.md", "table1.md", "losses.csv"):
        assert (storage / "results" / "tables" / name).stat().st_size > 0
    # the model folder went to the storage as one file (no directory() output: docs/scaling.md, "Upstream")
    with tarfile.open(storage / "resources" / "models" / MODEL / "model.tar") as archive:
        assert "model.safetensors" in archive.getnames()
