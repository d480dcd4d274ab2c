"""Reading a layer: every check that keeps a damaged or stale store from being measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from contextuality.store.files import READ_SLICE_ELEMENTS, REBUILD_HINT, StoreError, open_complete, read_checked


def read_manifest(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: unreadable manifest ({err}); {REBUILD_HINT}") from None


def check_layer(path: str | Path, manifest: dict, layer: int) -> None:
    """Refuse a layer file that is not the manifest's layer ``layer`` (index, rows, dims)."""
    path = Path(path)
    if not 0 <= layer < manifest["n_layers"]:
        raise StoreError(f"{path}: layer {layer} is out of range; the manifest lists layers 0-{manifest['n_layers'] - 1}")
    with open_complete(path) as handle:
        found = (int(handle.attrs.get("layer", -1)), *handle["vectors"].shape)
    expected = (layer, manifest["rows"], manifest["dim"])
    if found != expected:
        raise StoreError(
            f"{path}: holds layer {found[0]} with {found[1]} rows x {found[2]} dims, but the manifest expects layer "
            f"{expected[0]} with {expected[1]} x {expected[2]}; {REBUILD_HINT}"
        )


def check_layer_set(manifest: dict, measured: dict[int, dict], manifest_path: str | Path = "manifest.json") -> None:
    """Refuse a model whose measured layers are not exactly the manifest's, with its rows and dims."""
    expected = set(range(manifest["n_layers"]))
    missing, extra = sorted(expected - set(measured)), sorted(set(measured) - expected)
    problems = []
    if missing:
        problems.append(f"layers {missing} are missing")
    if extra:
        problems.append(f"layers {extra} are not in the manifest")
    for layer, shape in sorted(measured.items()):
        if layer in expected and (shape["rows"], shape["dim"]) != (manifest["rows"], manifest["dim"]):
            problems.append(f"layer {layer} was measured on {shape['rows']} rows x {shape['dim']} dims")
    if problems:
        raise StoreError(
            f"{manifest_path}: the model has layers 0-{manifest['n_layers'] - 1} of {manifest['rows']} rows x "
            f"{manifest['dim']} dims, but {'; '.join(problems)}; rerun snakemake to rebuild them"
        )


class LayerReader:
    """A layer file opened for reading, every shard it maps checked up front; ``rows`` reads a range.

    Checks: the layer file and each shard exist and are complete, and each shard's dataset has the
    rows the layer file maps (a shard rebuilt after its layer file is refused). Each shard is read
    directly, never through HDF5's virtual dataset, which would fill a missing source silently; the
    read verifies every chunk's checksum.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.handle = open_complete(self.path)
        self._shards: dict[str, h5py.File] = {}
        try:
            dataset = self.handle["vectors"]
            self.shape, self.dtype = dataset.shape, dataset.dtype
            self.offsets = read_checked(self.handle["sentence_offsets"], self.path).astype(np.int64)
            if self.offsets[-1] != self.shape[0]:
                raise StoreError(f"{self.path}: sentence_offsets ends at {self.offsets[-1]} but vectors has {self.shape[0]} rows")
            if dataset.is_virtual:
                self.sources = json.loads(self.handle.attrs["sources"])
                covered = sum(source["rows"] for source in self.sources)
                if covered != self.shape[0]:
                    raise StoreError(f"{self.path}: its sources cover {covered} of {self.shape[0]} rows; {REBUILD_HINT}")
                for source in self.sources:
                    self._open_source(source)
            else:  # a plain file (tests, hand-made stores): its own data
                self.sources = [{"file": None, "dataset": "vectors", "first_row": 0, "rows": self.shape[0]}]
        except BaseException:
            self.close()
            raise

    def _shard_path(self, source: dict) -> Path:
        return Path(os.path.normpath(self.path.parent / source["file"]))

    def _open_source(self, source: dict) -> None:
        shard_path = self._shard_path(source)
        if not shard_path.exists():
            raise StoreError(
                f"{self.path}: its vectors live in {shard_path}, which is missing; rerun snakemake to re-extract it "
                "(the layer files are rebuilt after it)"
            )
        shard = self._shards.get(source["file"]) or open_complete(shard_path)
        self._shards[source["file"]] = shard
        expected = (source["rows"], self.shape[1])
        found = shard[source["dataset"]].shape if source["dataset"] in shard else "no such dataset"
        if found != expected:
            raise StoreError(
                f"{shard_path}: {source['dataset']} is {found}, but {self.path} maps {expected[0]} rows x {expected[1]} "
                "dims: the shard was rebuilt after the layer file; rerun snakemake"
            )

    def _dataset(self, source: dict) -> tuple[h5py.Dataset, Path]:
        if source["file"] is None:
            return self.handle["vectors"], self.path
        return self._shards[source["file"]][source["dataset"]], self._shard_path(source)

    def rows(self, start: int = 0, stop: int | None = None, dtype: np.dtype | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` as one array (stored dtype unless ``dtype``), converted slice by slice."""
        stop = self.shape[0] if stop is None else stop
        out = np.empty((stop - start, self.shape[1]), dtype=self.dtype if dtype is None else np.dtype(dtype))
        for source in self.sources:
            first, last = max(start, source["first_row"]), min(stop, source["first_row"] + source["rows"])
            if first < last:
                dataset, path = self._dataset(source)
                local = first - source["first_row"]
                _copy_rows(dataset, path, out[first - start:last - start], local, last - first)
        return out

    def close(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self.handle.close()

    def __enter__(self) -> LayerReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_layer(path: str | Path, dtype: np.dtype | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A layer file's vectors as one in-memory array (stored dtype unless ``dtype``), and its offsets."""
    with LayerReader(path) as reader:
        return reader.rows(dtype=dtype), reader.offsets


def _copy_rows(dataset: h5py.Dataset, path: Path, out: np.ndarray, first: int, count: int) -> None:
    """``dataset[first:first + count]`` into ``out``, in slices when the dtype changes (bounded copies)."""
    step = count if out.dtype == dataset.dtype else max(1, READ_SLICE_ELEMENTS // max(out.shape[1], 1))
    for start in range(0, count, max(step, 1)):
        stop = min(start + step, count)
        out[start:stop] = read_checked(dataset, path, np.s_[first + start:first + stop])
