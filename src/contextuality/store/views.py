"""A model's manifest and its layer files: HDF5 virtual views over the shards, checked against the plan."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from contextuality.core import layout
from contextuality.core.atomic import atomic_path
from contextuality.store import provenance
from contextuality.store.files import REBUILD_HINT, StoreError, create_checked, layer_name, open_complete, read_checked

log = logging.getLogger(__name__)


SHARD_HINT = "delete the shard and rerun snakemake to extract it again"


def _shard_table(
    shard_paths: list[Path], expected: dict | None = None, against: str | None = None
) -> tuple[dict, np.ndarray, np.ndarray, list[int]]:
    """Attributes shared by the shards, gathered offsets and ids, and each shard's row count.

    Every shard's provenance must equal ``expected`` (held by ``against``; None: what the run would
    extract now) or, without it, the first shard's; and the shards must be shards 0..n-1 of n, in order
    (checked whenever they record it, always with ``expected``).
    """
    offsets, ids, rows, start, attrs = [np.zeros(1, dtype=np.int64)], [], [], 0, None
    for position, path in enumerate(shard_paths):
        with open_complete(path) as shard:
            if attrs is None:
                attrs = dict(shard.attrs)
            elif (int(shard.attrs["n_layers"]), int(shard.attrs["dim"])) != (int(attrs["n_layers"]), int(attrs["dim"])):
                raise StoreError(
                    f"{path}: {shard.attrs['n_layers']} layers x {shard.attrs['dim']} dims, but "
                    f"{shard_paths[0]} has {attrs['n_layers']} x {attrs['dim']}; {REBUILD_HINT}"
                )
            found = provenance.read(shard.attrs, path)
            if expected is not None:
                provenance.refuse_mismatch(path, found, expected, against, SHARD_HINT)
            else:
                provenance.refuse_mismatch(
                    path, found, provenance.read(attrs, shard_paths[0]), str(shard_paths[0]), SHARD_HINT
                )
            _check_shard_index(path, shard.attrs, position, len(shard_paths), required=expected is not None)
            local = read_checked(shard["sentence_offsets"], path).astype(np.int64)
            offsets.append(local[1:] + start)
            ids.append(read_checked(shard["sentence_ids"], path))
            rows.append(int(local[-1]))
            start += int(local[-1])
    sentence_ids = np.concatenate(ids).astype(np.int64)
    if not np.array_equal(sentence_ids, np.sort(sentence_ids)):
        raise StoreError("shards are not in sentence order; their sentence ids overlap or are shuffled")
    attrs = {k: v for k, v in attrs.items() if k not in ("complete", "shard", "n_shards", "first_row")}
    return attrs, np.concatenate(offsets), sentence_ids, rows


def _check_shard_index(path: Path, attrs, position: int, count: int, *, required: bool) -> None:
    """Refuse a shard that is not shard ``position`` of ``count`` (one recording no index only when not ``required``)."""
    if "shard" not in attrs and not required:
        return
    found = (int(attrs.get("shard", -1)), int(attrs.get("n_shards", -1)))
    if found != (position, count):
        raise StoreError(
            f"{path}: records shard {found[0]} of {found[1]}, but it stands as shard {position} of the "
            f"{count} shard files given; {SHARD_HINT}"
        )


def write_manifest(
    shard_paths: list[Path], units_path: Path, out_manifest: Path, *, model: str = "", expected: dict | None = None
) -> dict:
    """The model's ``manifest.json``, after checking the shards hold exactly the planned units.

    The manifest names the layers (``layers/layer_{LL}.h5``), the rows, dims and dtype, every shard with
    its rows, all relative to the model's embeddings folder, and the shards' provenance with its digest;
    every later reader checks against it. ``expected``: the provenance the shards must record (the
    workflow's: ``provenance.shard_provenance`` of the run's settings, source.json and plan files).
    """
    shard_paths = [Path(path) for path in shard_paths]
    attrs, offsets, sentence_ids, rows = _shard_table(shard_paths, expected)
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
    made_from = provenance.read(attrs, shard_paths[0])
    base = Path(out_manifest).parent
    manifest = {
        "model": model or str(attrs.get("model", "")),
        "n_layers": n_layers,
        "rows": total,
        "dim": dim,
        "dtype": str(attrs["dtype"]),
        "n_sentences": len(sentence_ids),
        "layers": [layout.path(layout.LAYER_IN_EMBEDDINGS, layer=layer) for layer in range(n_layers)],
        "shards": [{"file": os.path.relpath(path, base), "rows": count} for path, count in zip(shard_paths, rows)],
        "n_truncated_sentences": truncated,
        "n_skipped_sentences": skipped,
        # the decoder's final norm (GPT-2's ln_f, Llama's norm), which only the last layer has passed; "" if none
        "final_norm": str(attrs.get("final_norm", "")),
        "provenance": made_from,
        "provenance_sha256": provenance.digest(made_from),
    }
    with atomic_path(out_manifest) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    log.info("gathered %d shards: %d layers x %d rows x %d dims", len(shard_paths), n_layers, total, dim)
    return manifest


def write_layer_file(
    shard_paths: list[Path],
    layer: int,
    out_path: Path,
    manifest: dict | None = None,
    manifest_path: Path | str = "manifest.json",
) -> None:
    """One layer's file: a virtual ``vectors`` dataset over the shards, plus offsets, ids and attributes.

    With the model's ``manifest``, every shard must record its provenance (the layer file copies it)."""
    shard_paths = [Path(path) for path in shard_paths]
    expected = None if manifest is None else manifest["provenance"]
    attrs, offsets, sentence_ids, rows = _shard_table(shard_paths, expected, str(manifest_path))
    n_layers, dim, dtype = int(attrs["n_layers"]), int(attrs["dim"]), np.dtype(str(attrs["dtype"]))
    if not 0 <= layer < n_layers:
        raise StoreError(f"layer {layer} is out of range: the shards hold layers 0-{n_layers - 1}")
    total, dataset = int(sum(rows)), layer_name(layer)
    out_path = Path(out_path)
    layout = h5py.VirtualLayout(shape=(total, dim), dtype=dtype)
    start = 0
    for path, count in zip(shard_paths, rows):
        if count:
            # relative to the layer file's folder: HDF5 resolves it there, wherever the results folder lives;
            # the mapping is the only record of where the vectors are (readers follow it, and nothing else)
            relative = os.path.relpath(path, out_path.parent)
            layout[start : start + count] = h5py.VirtualSource(relative, dataset, shape=(count, dim))
        start += count
    truncated = skipped = 0
    for path in shard_paths:
        with open_complete(path) as shard:
            truncated += int(shard.attrs.get("n_truncated_sentences", 0))
            skipped += int(shard.attrs.get("n_skipped_sentences", 0))
    with atomic_path(out_path) as tmp, h5py.File(tmp, "w") as out:
        # NaN where a source is missing (HDF5 fills silently): a reader bypassing read_layer sees NaN, not zeros
        # no creation time in the object header (HDF5's default for a virtual dataset, which h5py does not
        # turn off as it does for others): the same shards give the same bytes
        layout.dcpl.set_obj_track_times(False)
        out.create_virtual_dataset("vectors", layout, fillvalue=np.nan)
        create_checked(out, "sentence_offsets", offsets.shape, np.int64, data=offsets)
        create_checked(out, "sentence_ids", sentence_ids.shape, np.int64, data=sentence_ids)
        out.attrs.update(attrs)
        out.attrs.update(
            {
                "layer": layer,
                "n_truncated_sentences": truncated,
                "n_skipped_sentences": skipped,
                # 1 for the last layer of a pre-norm decoder: it has passed the final norm, the others have not
                "after_final_norm": int(bool(attrs.get("final_norm", "")) and layer == n_layers - 1),
                "complete": 1,
            }
        )
