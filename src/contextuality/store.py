"""HDF5 layout of the stored vectors: shard files hold the data, per-layer files are views over them.

* A **shard file** (``shards/shard_{s}.h5``, one extraction job) holds one dataset per layer
  (``layer_{LL}``, shape ``(n_rows, dim)``) for a contiguous block of sentences, plus
  ``sentence_offsets`` and ``sentence_ids``. These are the only copy of the vectors.
* A **layer file** (``layers/layer_{LL}.h5``) holds ``vectors`` as an HDF5 virtual dataset over the
  shards' ``layer_{LL}`` datasets (relative paths, so a moved or staged results folder still works),
  the gathered ``sentence_offsets`` and ``sentence_ids``, and the provenance attributes. It is a few
  kilobytes, so every layer is its own workflow output without storing the vectors twice.
* ``manifest.json`` (rule ``gather``) lists the model's layers, rows, dims and shards: every reader
  checks what it reads against it.

Every dataset is chunked with HDF5's fletcher32 checksum, which every read verifies, so a flipped byte
stops the reading job naming the damaged file. Every file carries ``complete = 1`` only once fully
written, and is written under a temporary name first. HDF5 silently fills a virtual dataset's missing
source with its fill value; ``read_layer`` therefore reads each shard directly, after checking that it
exists, is complete and has the rows the layer file expects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from contextuality import diskspace
from contextuality.atomic import atomic_path

log = logging.getLogger(__name__)

# Rows per HDF5 chunk: 1,024 rows of a 576-dim float16 layer are 1.2 MB, checksummed as one.
CHUNK_ROWS = 1024
EXPORT_CHUNK_SENTENCES = 1000
# Elements read from HDF5 per slice while converting to another dtype (bounds the temporary copy, and keeps
# it in cache for the conversion).
READ_SLICE_ELEMENTS = 1 << 20
REBUILD_HINT = "delete it and rerun snakemake, which rebuilds it and everything that depends on it"


class StoreError(RuntimeError):
    """A stored file is missing, incomplete, damaged or inconsistent; the message names it."""


def open_complete(path: str | Path) -> h5py.File:
    """Open an HDF5 file for reading, refusing one that was not completely written."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: missing; rerun snakemake to rebuild it")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise StoreError(f"{path}: not a readable HDF5 file ({err}); {REBUILD_HINT}") from None
    if handle.attrs.get("complete") != 1:
        handle.close()
        raise StoreError(f"{path}: incomplete (no 'complete' marker); {REBUILD_HINT}")
    return handle


def layer_name(layer: int) -> str:
    """Name of a layer's dataset in a shard file, and stem of its layer file (two digits, or more)."""
    return f"layer_{layer:02d}"


def layer_file_name(layer: int) -> str:
    return f"{layer_name(layer)}.h5"


def chunk_rows(n_rows: int) -> int:
    """Rows per chunk: at most CHUNK_ROWS, balanced so the last chunk is nearly full.

    HDF5 stores a partial last chunk at full size; equal chunks waste fewer rows than chunks.
    """
    n_rows = max(1, n_rows)
    return -(-n_rows // -(-n_rows // CHUNK_ROWS))


def create_checked(h5: h5py.File | h5py.Group, name: str, shape: tuple[int, ...], dtype, data=None) -> h5py.Dataset:
    """A chunked dataset with HDF5's fletcher32 checksum on every chunk (verified on every read)."""
    chunks = (chunk_rows(shape[0]), *(max(1, size) for size in shape[1:]))
    # HDF5 chunks no empty fixed-size dataset (an empty shard): let it be extendible instead
    maxshape = (None, *shape[1:]) if shape[0] == 0 else None
    return h5.create_dataset(
        name, shape=shape, dtype=dtype, data=data, chunks=chunks, maxshape=maxshape, fletcher32=True
    )


# --------------------------------------------------------------------------------------------------
# Gathering: the model's units table and manifest, and one virtual layer file per layer


def _read_checked(dataset: h5py.Dataset, path: Path, selection=np.s_[...]) -> np.ndarray:
    try:
        return dataset[selection]
    except OSError as err:
        raise StoreError(
            f"{path}: dataset {dataset.name.lstrip('/')} fails its checksum or cannot be read ({err}): the file is "
            f"damaged; {REBUILD_HINT}"
        ) from None


def _shard_table(shard_paths: list[Path]) -> tuple[dict, np.ndarray, np.ndarray, list[int]]:
    """Attributes shared by the shards, gathered offsets and ids, and each shard's row count."""
    offsets, ids, rows, start, attrs = [np.zeros(1, dtype=np.int64)], [], [], 0, None
    for path in shard_paths:
        with open_complete(path) as shard:
            if attrs is None:
                attrs = dict(shard.attrs)
            elif (int(shard.attrs["n_layers"]), int(shard.attrs["dim"])) != (int(attrs["n_layers"]), int(attrs["dim"])):
                raise StoreError(f"{path}: {shard.attrs['n_layers']} layers x {shard.attrs['dim']} dims, but "
                                 f"{shard_paths[0]} has {attrs['n_layers']} x {attrs['dim']}; {REBUILD_HINT}")
            local = _read_checked(shard["sentence_offsets"], path).astype(np.int64)
            offsets.append(local[1:] + start)
            ids.append(_read_checked(shard["sentence_ids"], path))
            rows.append(int(local[-1]))
            start += int(local[-1])
    sentence_ids = np.concatenate(ids).astype(np.int64)
    if not np.array_equal(sentence_ids, np.sort(sentence_ids)):
        raise StoreError("shards are not in sentence order; their sentence ids overlap or are shuffled")
    attrs = {k: v for k, v in attrs.items() if k not in ("complete", "shard", "n_shards", "first_row")}
    return attrs, np.concatenate(offsets), sentence_ids, rows


def gather(shard_paths: list[Path], units_path: Path, out_manifest: Path, *, model: str = "") -> dict:
    """The model's ``manifest.json``, after checking the shards hold exactly the planned units.

    The manifest names the layers (``layers/layer_{LL}.h5``), the rows, dims and dtype, and every shard
    with its rows, all relative to the model's embeddings folder; every later reader checks against it.
    """
    shard_paths = [Path(path) for path in shard_paths]
    attrs, offsets, sentence_ids, rows = _shard_table(shard_paths)
    truncated, skipped = 0, 0
    for path in shard_paths:
        with open_complete(path) as shard:
            truncated += int(shard.attrs.get("n_truncated_sentences", 0))
            skipped += int(shard.attrs.get("n_skipped_sentences", 0))
    total = int(sum(rows))
    units = pd.read_parquet(units_path, columns=["row", "sentence_id"])
    if len(units) != total or not np.array_equal(units["row"].to_numpy(), np.arange(total)):
        raise StoreError(f"{units_path} lists {len(units)} rows but the shards hold {total} vectors; {REBUILD_HINT}")
    planned = np.bincount(np.searchsorted(sentence_ids, units["sentence_id"].to_numpy()), minlength=len(sentence_ids))
    if not np.array_equal(planned, np.diff(offsets)):
        raise StoreError(f"the shards' rows per sentence differ from the plan in {units_path}; {REBUILD_HINT}")
    n_layers, dim = int(attrs["n_layers"]), int(attrs["dim"])
    base = Path(out_manifest).parent
    manifest = {
        "model": model or str(attrs.get("model", "")), "n_layers": n_layers, "rows": total, "dim": dim,
        "dtype": str(attrs["dtype"]), "n_sentences": len(sentence_ids),
        "layers": [f"layers/{layer_file_name(layer)}" for layer in range(n_layers)],
        "shards": [
            {"file": os.path.relpath(path, base), "rows": count} for path, count in zip(shard_paths, rows)
        ],
        "n_truncated_sentences": truncated, "n_skipped_sentences": skipped,
        # the decoder's final norm (GPT-2's ln_f, Llama's norm), which only the last layer has passed; "" if none
        "final_norm": str(attrs.get("final_norm", "")),
    }
    with atomic_path(out_manifest) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    log.info("gathered %d shards: %d layers x %d rows x %d dims", len(shard_paths), n_layers, total, dim)
    return manifest


def write_layer_file(shard_paths: list[Path], layer: int, out_path: Path) -> None:
    """One layer's file: a virtual ``vectors`` dataset over the shards, plus offsets, ids and attributes."""
    shard_paths = [Path(path) for path in shard_paths]
    attrs, offsets, sentence_ids, rows = _shard_table(shard_paths)
    n_layers, dim, dtype = int(attrs["n_layers"]), int(attrs["dim"]), np.dtype(str(attrs["dtype"]))
    if not 0 <= layer < n_layers:
        raise StoreError(f"layer {layer} is out of range: the shards hold layers 0-{n_layers - 1}")
    total, dataset = int(sum(rows)), layer_name(layer)
    out_path = Path(out_path)
    layout = h5py.VirtualLayout(shape=(total, dim), dtype=dtype)
    sources, start = [], 0
    for path, count in zip(shard_paths, rows):
        if count:
            # relative to the layer file's folder: HDF5 resolves it there, wherever the results folder lives
            relative = os.path.relpath(path, out_path.parent)
            layout[start:start + count] = h5py.VirtualSource(relative, dataset, shape=(count, dim))
            sources.append({"file": relative, "dataset": dataset, "first_row": start, "rows": count})
        start += count
    truncated = skipped = 0
    for path in shard_paths:
        with open_complete(path) as shard:
            truncated += int(shard.attrs.get("n_truncated_sentences", 0))
            skipped += int(shard.attrs.get("n_skipped_sentences", 0))
    with atomic_path(out_path) as tmp, h5py.File(tmp, "w") as out:
        # NaN where a source is missing (HDF5 fills silently): a reader bypassing read_layer sees NaN, not zeros
        out.create_virtual_dataset("vectors", layout, fillvalue=np.nan)
        create_checked(out, "sentence_offsets", offsets.shape, np.int64, data=offsets)
        create_checked(out, "sentence_ids", sentence_ids.shape, np.int64, data=sentence_ids)
        out.attrs.update(attrs)
        out.attrs.update({
            "layer": layer, "n_truncated_sentences": truncated, "n_skipped_sentences": skipped,
            # 1 for the last layer of a pre-norm decoder: it has passed the final norm, the others have not
            "after_final_norm": int(bool(attrs.get("final_norm", "")) and layer == n_layers - 1),
            "sources": json.dumps(sources), "complete": 1,
        })


# --------------------------------------------------------------------------------------------------
# Reading, with every check that keeps a damaged or stale store from being measured


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
            self.offsets = _read_checked(self.handle["sentence_offsets"], self.path).astype(np.int64)
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
        out[start:stop] = _read_checked(dataset, path, np.s_[first + start:first + stop])


# --------------------------------------------------------------------------------------------------
# The classic layout of the paper's code and allennlp's `elmo` command


def export_classic(layer_paths: list[Path], occurrences: pd.DataFrame, out_h5: Path, out_word2sent: Path,
                   disk_factor: float = 1.2, sentences: pd.DataFrame | None = None) -> None:
    """One HDF5 per model, one dataset per sentence index (a string) of shape ``(layers, tokens, dim)``.

    Also ``sentence_to_index`` (a JSON string, as allennlp's ``elmo`` command writes it: each sentence's
    text to its dataset key; a text that occurs twice keeps its last key, as there) and
    ``word2sent.json`` mapping each word to its ``[sentence index, token position]`` pairs. Written a
    chunk of sentences at a time: memory stays at one chunk of every layer.
    """
    stack = contextlib.ExitStack()  # the disk reservation, held while writing
    readers = [LayerReader(path) for path in layer_paths]
    try:
        needed = sum(reader.shape[0] * reader.shape[1] * reader.dtype.itemsize for reader in readers)
        stack.enter_context(diskspace.reserve(out_h5, needed, disk_factor))
        offsets = readers[0].offsets
        ids = _read_checked(readers[0].handle["sentence_ids"], readers[0].path)
        with atomic_path(out_h5) as tmp, h5py.File(tmp, "w") as out:
            for first in range(0, len(ids), EXPORT_CHUNK_SENTENCES):
                last = min(first + EXPORT_CHUNK_SENTENCES, len(ids))
                chunk = np.stack([reader.rows(offsets[first], offsets[last]) for reader in readers])
                for i in range(first, last):
                    out.create_dataset(str(int(ids[i])), data=chunk[:, offsets[i] - offsets[first]:offsets[i + 1] - offsets[first]])
            texts = {} if sentences is None else dict(zip(sentences["sentence_id"].tolist(), sentences["text"].tolist()))
            to_index = {texts[int(i)]: str(int(i)) for i in ids if int(i) in texts}
            out.create_dataset("sentence_to_index", data=json.dumps(to_index))
    finally:
        stack.close()
        for reader in readers:
            reader.close()
    word2sent = {
        word: group[["sentence_id", "position"]].astype(int).values.tolist()
        for word, group in occurrences.groupby("word", sort=True)
    }
    with atomic_path(out_word2sent) as tmp:
        tmp.write_text(json.dumps(word2sent))
