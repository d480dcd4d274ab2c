"""Reading a layer: every check that keeps a damaged or stale store from being measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from contextuality.store import provenance
from contextuality.store.files import READ_SLICE_ELEMENTS, REBUILD_HINT, StoreError, open_complete, read_checked


def read_manifest(path: str | Path) -> Manifest:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: unreadable manifest ({err}); {REBUILD_HINT}") from None
    if "provenance" not in data:
        raise StoreError(f"{path}: records no provenance (written by an older version); {REBUILD_HINT}")
    return Manifest(data, path)


def check_layer(path: str | Path, manifest: dict, layer: int) -> None:
    """Refuse a layer file that is not the manifest's layer ``layer`` (index, rows, dims)."""
    path = Path(path)
    if not 0 <= layer < manifest["n_layers"]:
        raise StoreError(
            f"{path}: layer {layer} is out of range; the manifest lists layers 0-{manifest['n_layers'] - 1}"
        )
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


class Manifest(dict):
    """A model's manifest (``manifest.json``'s keys), knowing where it lives: its shards are relative to it."""

    def __init__(self, data: dict, path: str | Path):
        super().__init__(data)
        self.path = Path(path)

    def shard_position(self, path: Path) -> int | None:
        """The index of shard file ``path`` among the manifest's shards (paths relative to the manifest), or None."""
        listed = [os.path.abspath(self.path.parent / shard["file"]) for shard in self["shards"]]
        return listed.index(os.path.abspath(path)) if os.path.abspath(path) in listed else None


class LayerReader:
    """A layer file opened for reading, every shard it maps checked up front; ``rows`` reads a range.

    Checks: the layer file and each shard exist and are complete, and each shard's dataset has the
    rows the layer file maps (a shard rebuilt after its layer file is refused). The rows are read from
    what the file's virtual dataset maps (each source's file, dataset and selections), each shard
    directly, never through HDF5's virtual dataset, which would fill a missing source silently; the read
    verifies every chunk's checksum. Each shard's provenance must equal the layer file's. With a
    ``manifest`` (``read_manifest``), the layer file's provenance must equal the manifest's, and it may
    map only the manifest's shards, each recording its place among them.
    """

    def __init__(self, path: str | Path, manifest: Manifest | None = None):
        self.path = Path(path)
        self.handle = open_complete(self.path)
        self._shards: dict[Path, h5py.File] = {}
        try:
            dataset = self.handle["vectors"]
            self.shape, self.dtype = dataset.shape, dataset.dtype
            self.offsets = read_checked(self.handle["sentence_offsets"], self.path).astype(np.int64)
            if self.offsets[-1] != self.shape[0]:
                raise StoreError(
                    f"{self.path}: sentence_offsets ends at {self.offsets[-1]} but vectors has {self.shape[0]} rows"
                )
            self.provenance = provenance.read(self.handle.attrs, self.path)
            if manifest is not None:
                provenance.refuse_mismatch(
                    self.path, self.provenance, manifest["provenance"], str(manifest.path), REBUILD_HINT
                )
            if dataset.is_virtual:
                self.sources = mapped_sources(self.path, dataset)
                for source in self.sources:
                    self._open_source(source, manifest)
            elif manifest is not None:
                raise StoreError(
                    f"{self.path}: holds its own vectors, not a view of the shards listed in {manifest.path}; "
                    f"{REBUILD_HINT}"
                )
            else:  # a plain file (tests, hand-made stores): its own data
                self.sources = [
                    {"file": None, "dataset": "vectors", "first_row": 0, "rows": self.shape[0], "local_row": 0}
                ]
        except BaseException:
            self.close()
            raise

    def _open_source(self, source: dict, manifest: Manifest | None) -> None:
        shard_path = source["file"]
        if manifest is not None and manifest.shard_position(shard_path) is None:
            raise StoreError(
                f"{self.path}: its virtual dataset maps {shard_path}, which is not one of the model's shards listed "
                f"in {manifest.path}; {REBUILD_HINT}"
            )
        if not shard_path.exists():
            raise StoreError(
                f"{self.path}: its vectors live in {shard_path}, which is missing; rerun snakemake to re-extract it "
                "(the layer files are rebuilt after it)"
            )
        if shard_path not in self._shards:
            shard = self._shards[shard_path] = open_complete(shard_path)
            provenance.refuse_mismatch(
                shard_path,
                provenance.read(shard.attrs, shard_path),
                self.provenance,
                str(self.path),
                "delete the shard and rerun snakemake to extract it again",
            )
            if manifest is not None:
                position = manifest.shard_position(shard_path)
                found = (int(shard.attrs.get("shard", -1)), int(shard.attrs.get("n_shards", -1)))
                if found != (position, len(manifest["shards"])):
                    raise StoreError(
                        f"{shard_path}: records shard {found[0]} of {found[1]}, but {manifest.path} lists it "
                        f"as shard {position} of {len(manifest['shards'])}; {REBUILD_HINT}"
                    )
        shard = self._shards[shard_path]
        found = shard[source["dataset"]].shape if source["dataset"] in shard else "no such dataset"
        needed = (source["local_row"] + source["rows"], self.shape[1])
        fits = (
            found == needed
            if source["whole"]
            else isinstance(found, tuple) and found[0] >= needed[0] and found[1:] == needed[1:]
        )
        if not fits:
            raise StoreError(
                f"{shard_path}: {source['dataset']} is {found}, but {self.path} maps {source['rows']} rows x {self.shape[1]} "
                "dims: the shard was rebuilt after the layer file; rerun snakemake"
            )

    def _dataset(self, source: dict) -> tuple[h5py.Dataset, Path]:
        if source["file"] is None:
            return self.handle["vectors"], self.path
        return self._shards[source["file"]][source["dataset"]], source["file"]

    def rows(self, start: int = 0, stop: int | None = None, dtype: np.dtype | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` as one array (stored dtype unless ``dtype``), converted slice by slice."""
        stop = self.shape[0] if stop is None else stop
        out = np.empty((stop - start, self.shape[1]), dtype=self.dtype if dtype is None else np.dtype(dtype))
        for source in self.sources:
            first, last = max(start, source["first_row"]), min(stop, source["first_row"] + source["rows"])
            if first < last:
                dataset, path = self._dataset(source)
                local = first - source["first_row"] + source["local_row"]
                _copy_rows(dataset, path, out[first - start : last - start], local, last - first)
        return out

    def close(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self.handle.close()

    def __enter__(self) -> LayerReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_layer(
    path: str | Path, dtype: np.dtype | None = None, manifest: Manifest | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A layer file's vectors as one in-memory array (stored dtype unless ``dtype``), and its offsets."""
    with LayerReader(path, manifest) as reader:
        return reader.rows(dtype=dtype), reader.offsets


def _copy_rows(dataset: h5py.Dataset, path: Path, out: np.ndarray, first: int, count: int) -> None:
    """``dataset[first:first + count]`` into ``out``, in slices when the dtype changes (bounded copies)."""
    step = count if out.dtype == dataset.dtype else max(1, READ_SLICE_ELEMENTS // max(out.shape[1], 1))
    for start in range(0, count, max(step, 1)):
        stop = min(start + step, count)
        out[start:stop] = read_checked(dataset, path, np.s_[first + start : first + stop])


def mapped_sources(path: Path, dataset: h5py.Dataset) -> list[dict]:
    """What a virtual dataset maps, from its own mapping: per source its file (resolved next to ``path``),
    dataset, the rows it fills (``first_row``, ``rows``) and the first row read (``local_row``; ``whole``:
    the source dataset is mapped whole). Refuses a mapping that does not fill every row exactly once."""
    plist, sources = dataset.id.get_create_plist(), []
    width = dataset.shape[1]
    for j in range(plist.get_virtual_count()):
        target, selected = plist.get_virtual_vspace(j), plist.get_virtual_srcspace(j)
        first, rows = _rectangle(target, width)
        whole = selected.get_select_type() == h5py.h5s.SEL_ALL
        local = 0 if whole else _rectangle(selected, width, rows)[0]
        if first is None or local is None:
            raise StoreError(
                f"{path}: its virtual dataset maps something other than whole rows ({j}th mapping); {REBUILD_HINT}"
            )
        name = plist.get_virtual_filename(j)
        file = path if name == "." else Path(os.path.normpath(path.parent / name))
        sources.append({"file": file, "dataset": plist.get_virtual_dsetname(j), "first_row": first, "rows": rows,
                        "local_row": local, "whole": whole})  # fmt: skip
    sources.sort(key=lambda source: source["first_row"])
    starts = np.cumsum([0] + [source["rows"] for source in sources])
    if starts[-1] != dataset.shape[0] or any(source["first_row"] != start for source, start in zip(sources, starts)):
        raise StoreError(
            f"{path}: its virtual dataset does not map each of its {dataset.shape[0]} rows exactly once; {REBUILD_HINT}"
        )
    return sources


def _rectangle(space, width: int, rows: int | None = None) -> tuple[int | None, int]:
    """(first row, rows) of a selection that is whole rows ``[first, first + rows)`` of ``width`` columns
    (of ``rows`` rows when given), else (None, 0)."""
    if space.get_select_type() != h5py.h5s.SEL_HYPERSLABS:
        return None, 0
    (first, column), (last, last_column) = space.get_select_bounds()
    count = last - first + 1
    if (
        (column, last_column) != (0, width - 1)
        or space.get_select_npoints() != count * width
        or rows not in (None, count)
    ):
        return None, 0
    return first, count
