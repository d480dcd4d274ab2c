"""HDF5 layout of the stored vectors: shard files, per-layer files, and the classic export.

A shard file holds one dataset per layer (``layer_{L}``, shape ``(n_rows, dim)``) for a contiguous
block of sentences, plus ``sentence_offsets`` and ``sentence_ids``. Gathering concatenates the shards
into one file per layer (``vectors``, ``sentence_offsets``, ``sentence_ids``). Every file carries the
attribute ``complete = 1`` only once fully written, and is written under a temporary name first, so a
file without it (a crash, a hand-truncated copy) is refused by ``open_complete``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from contextuality.atomic import atomic_path

log = logging.getLogger(__name__)

CHUNK_ROWS = 4096
EXPORT_CHUNK_SENTENCES = 1000


class StoreError(RuntimeError):
    """A stored file is missing, incomplete or inconsistent; the message names it."""


def open_complete(path: str | Path) -> h5py.File:
    """Open an HDF5 file for reading, refusing one that was not completely written."""
    path = Path(path)
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise StoreError(f"{path}: not a readable HDF5 file ({err}); delete it and rerun its rule") from None
    if handle.attrs.get("complete") != 1:
        handle.close()
        raise StoreError(f"{path}: incomplete (no 'complete' marker); delete it and rerun its rule")
    return handle


def layer_file_name(layer: int) -> str:
    return f"layer_{layer:02d}.h5"


def layer_files(layers_dir: str | Path) -> dict[int, Path]:
    """Per-layer files of a gathered model, by layer index."""
    found = {int(path.stem.split("_")[1]): path for path in Path(layers_dir).glob("layer_*.h5")}
    if not found:
        raise StoreError(f"{layers_dir}: no layer_*.h5 files")
    return dict(sorted(found.items()))


def gather(shard_paths: list[Path], shard_units: list[Path], out_dir: Path, storage_dtype: str) -> None:
    """Concatenate shard files into one file per layer plus ``units.parquet`` (a real copy)."""
    shards = [open_complete(path) for path in shard_paths]
    try:
        n_layers = int(shards[0].attrs["n_layers"])
        dim = int(shards[0].attrs["dim"])
        counts = [shard["layer_00"].shape[0] for shard in shards]
        total = int(sum(counts))
        offsets, ids, start = [np.zeros(1, dtype=np.int64)], [], 0
        for shard in shards:
            local = shard["sentence_offsets"][:]
            offsets.append(local[1:] + start)
            ids.append(shard["sentence_ids"][:])
            start += int(local[-1])
        offsets = np.concatenate(offsets)
        sentence_ids = np.concatenate(ids)
        if not np.array_equal(sentence_ids, np.sort(sentence_ids)):
            raise StoreError("shards are not in sentence order; their sentence ids overlap or are shuffled")
        attrs = {k: v for k, v in shards[0].attrs.items() if k not in ("complete", "shard", "n_shards")}
        attrs["n_truncated_sentences"] = int(sum(int(s.attrs.get("n_truncated_sentences", 0)) for s in shards))
        attrs["n_skipped_sentences"] = int(sum(int(s.attrs.get("n_skipped_sentences", 0)) for s in shards))
        with atomic_path(out_dir) as tmp:
            tmp.mkdir()
            for layer in range(n_layers):
                with h5py.File(tmp / layer_file_name(layer), "w") as out:
                    vectors = out.create_dataset(
                        "vectors", shape=(total, dim), dtype=storage_dtype, chunks=(min(CHUNK_ROWS, total), dim) if total else None
                    )
                    row = 0
                    for shard, count in zip(shards, counts):
                        vectors[row:row + count] = shard[f"layer_{layer:02d}"][:]
                        row += count
                    out.create_dataset("sentence_offsets", data=offsets)
                    out.create_dataset("sentence_ids", data=sentence_ids)
                    out.attrs.update(attrs)
                    out.attrs["layer"] = layer
                    out.attrs["complete"] = 1
            units = pd.concat([pd.read_parquet(path) for path in shard_units], ignore_index=True)
            units["row"] = np.arange(len(units), dtype=np.int64)
            if len(units) != total:
                raise StoreError(f"units tables list {len(units)} rows but the shards hold {total} vectors")
            units.to_parquet(tmp / "units.parquet", index=False)
            (tmp / "manifest.json").write_text(json.dumps({"layers": n_layers, "rows": total, "dim": dim}) + "\n")
    finally:
        for shard in shards:
            shard.close()
    log.info("gathered %d shards: %d layers x %d rows x %d dims", len(shard_paths), n_layers, total, dim)


def export_classic(layers_dir: Path, occurrences: pd.DataFrame, out_h5: Path, out_word2sent: Path) -> None:
    """The layout of the paper's code and allennlp's ``elmo`` command.

    One HDF5 per model, one dataset per sentence index (a string) of shape ``(layers, tokens, dim)``,
    and ``word2sent.json`` mapping each word to its ``[sentence index, token position]`` pairs.
    """
    files = layer_files(layers_dir)
    handles = [open_complete(path) for path in files.values()]
    try:
        offsets = handles[0]["sentence_offsets"][:]
        ids = handles[0]["sentence_ids"][:]
        with atomic_path(out_h5) as tmp, h5py.File(tmp, "w") as out:
            # a chunk of sentences at a time: memory stays at one chunk of every layer
            for first in range(0, len(ids), EXPORT_CHUNK_SENTENCES):
                last = min(first + EXPORT_CHUNK_SENTENCES, len(ids))
                rows = slice(offsets[first], offsets[last])
                chunk = np.stack([handle["vectors"][rows] for handle in handles])
                for i in range(first, last):
                    block = chunk[:, offsets[i] - offsets[first]:offsets[i + 1] - offsets[first]]
                    out.create_dataset(str(int(ids[i])), data=block)
            out.create_dataset("sentence_to_index", data=json.dumps({}))
    finally:
        for handle in handles:
            handle.close()
    word2sent = {
        word: group[["sentence_id", "position"]].astype(int).values.tolist()
        for word, group in occurrences.groupby("word", sort=True)
    }
    with atomic_path(out_word2sent) as tmp:
        tmp.write_text(json.dumps(word2sent))
