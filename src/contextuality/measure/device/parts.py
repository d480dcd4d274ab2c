"""A device measurement's parts as files (rule ``measure_model``'s outputs): what each part records it was made
from, the checks that refuse a part made from something else, and each layer's files taken out of its part's tar.

A part's record holds the provenance a store's manifest would hold (``store.provenance.shard_provenance``) less what
changes no row the device computes (``ROWS_FREE``: the device path cuts no shard), so a part is checked against the
run's settings, weights and plan as a manifest is, and against a store kept beside it.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from pathlib import Path

import numpy as np

from contextuality.core import layout
from contextuality.core.atomic import atomic_path
from contextuality.store import provenance as provenance_module
from contextuality.store.files import StoreError, layer_name

# Settings in a store's provenance that change no row the device path computes: it cuts no shard.
ROWS_FREE = ("n_shards",)
# Measurement settings that change no number on the device path: the store path's chunking budget.
MEASURES_FREE = ("memory_mb",)


def part_layers(n_layers: int, parts: int, part: int) -> list[int]:
    """The consecutive layers of ``part`` (of ``parts``): as even as the layer count allows."""
    return list(range(part * n_layers // parts, (part + 1) * n_layers // parts))


def part_of_layer(layer: int, n_layers: int, parts: int) -> int:
    """The part (of ``parts``) whose layers (``part_layers``) hold ``layer``."""
    return next(part for part in range(parts) if layer in part_layers(n_layers, parts, part))


def remeasure_hint(part_file: Path | str) -> str:
    """How to recover from a damaged or foreign part: its tar or record deleted, the next run measures the part
    again (a layer file deleted instead would come back from the same tar)."""
    return f"delete {part_file} and rerun snakemake, which measures the part again and rebuilds what depends on it"


def parts_hint(record: Path | str) -> str:
    """How to recover from layer files that do not match their parts' records: every part measured again."""
    return (f"delete the model's part records ({Path(record).parent / 'part_*.json'}) and rerun snakemake, which "
            "measures the parts again (a layer file deleted instead would come back from the same tar)")  # fmt: skip


def rows_params(shard) -> dict:
    """What changes the device's rows, as the device rules' params: ``stored_params`` less ``ROWS_FREE``."""
    from contextuality.core.settings import stored_params

    return rows_provenance(stored_params(shard))


def measure_params(measure) -> dict:
    """What changes a part's measures, as ``measure_model``'s params: the metrics settings less ``MEASURES_FREE``."""
    from contextuality.core.settings import as_params

    return {key: value for key, value in as_params(measure).items() if key not in MEASURES_FREE}


def rows_provenance(made_from: dict) -> dict:
    """What the device's rows are made from: a store's provenance less ``ROWS_FREE``."""
    return {key: value for key, value in made_from.items() if key not in ROWS_FREE}


def device_record(figures: dict, *, model_key: str, provenance: dict, dtype: str) -> dict:
    """What the device's rows were made from, in the manifest's keys (``store.views.write_manifest``) that the
    combining step checks against: layers, rows, dims, and the provenance with its digest."""
    return {
        "model": model_key, "n_layers": figures["n_layers"], "rows": figures["rows"], "dim": figures["dim"],
        "dtype": dtype, "n_sentences": figures["n_sentences"], "final_norm": figures["final_norm"],
        "provenance": provenance, "provenance_sha256": provenance_module.digest(provenance),
    }  # fmt: skip


def check_parts_against_run(records: list, expected: dict) -> None:
    """Refuse a part whose record was made from other settings, weights or a plan than the run's (``expected``:
    ``shard_provenance`` of the run's settings, source.json and plan files), naming the first key that differs."""
    for record in records:
        provenance_module.refuse_mismatch(
            record.path, rows_provenance(record.get("provenance", {})), rows_provenance(expected), None,
            remeasure_hint(record.path),
        )  # fmt: skip


def same_rows(record: dict, other: dict) -> bool:
    """Whether two records (device parts, or a part and a store's manifest) describe rows made from the same."""
    return rows_provenance(record.get("provenance", {})) == rows_provenance(other.get("provenance", {}))


def take_layer_files(part_tar: Path, layer: int, out: dict[str, Path]) -> None:
    """Layer ``layer``'s record, words table and PC vectors (``out``: by those names) out of a part's tar, each
    written under a temporary name and renamed; a tar without them, or damaged, is refused naming it."""
    members = {"record": layout.LAYER_RECORD, "words": layout.LAYER_WORDS, "pcs": layout.PCS}
    hint = remeasure_hint(part_tar)
    try:
        with tarfile.open(part_tar) as tar:
            for name, pattern in members.items():
                member = layout.path(layout.in_metrics(pattern), layer=layer)
                try:
                    source = tar.extractfile(member)
                except KeyError:
                    source = None
                if source is None:
                    raise StoreError(f"{part_tar}: holds no {member} (measured for other layers, or cut short); {hint}")
                with atomic_path(out[name]) as tmp, open(tmp, "wb") as target:
                    shutil.copyfileobj(source, target)
    except (tarfile.TarError, EOFError) as err:
        raise StoreError(f"{part_tar}: not a complete tar of the part's layers (truncated or damaged: {err}); "
                         f"{hint}") from None  # fmt: skip


class Resume:
    """The layers an earlier job of this part finished before it was killed (their files in ``staging``, the part's
    folder before it is packed), kept for the next job when it measures what that job measured (``key``: the rows'
    provenance, the measures, the part, the similarity sample); anything else is cleared. ``state`` (beside the
    staging folder, not packed) marks each layer once its files (and its sample rows) are written."""

    def __init__(self, staging: Path, key: dict):
        self.staging, self.state = Path(staging), Path(staging).with_suffix(".resume")
        token = provenance_module.digest(key)
        kept = self.state / "key"
        if not (kept.is_file() and kept.read_text() == token):
            self.clear()
            self.staging.mkdir(parents=True)
            self.state.mkdir(parents=True)
            with atomic_path(kept) as tmp:
                tmp.write_text(token)
        self.done = sorted(layer for layer in self._marked() if all(path.is_file() for path in self.files(layer)))

    def files(self, layer: int) -> list[Path]:
        return [self.staging / layout.path(layout.in_metrics(pattern), layer=layer)
                for pattern in (layout.LAYER_RECORD, layout.LAYER_WORDS, layout.PCS)]  # fmt: skip

    def _marked(self) -> list[int]:
        return [int(path.name.split("_")[1].split(".")[0]) for path in self.state.glob("layer_*.done")]

    def mark(self, layer: int) -> None:
        """Layer ``layer``'s files are written (called after them, from a host thread)."""
        (self.state / f"{layer_name(layer)}.done").touch()

    def keep_sample(self, layer: int, rows) -> None:
        from contextuality.measure.engine import backend

        with atomic_path(self.state / f"{layer_name(layer)}.sample.npy") as tmp, open(tmp, "wb") as handle:
            np.save(handle, np.ascontiguousarray(backend.to_host(rows)))

    def kept_sample(self, layer: int) -> np.ndarray:
        return np.load(self.state / f"{layer_name(layer)}.sample.npy")

    def clear(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)


def resume_key(made_from: dict, measure, parts: int, part: int, sample) -> dict:
    """What a part's kept layers must have been measured with to be kept (``Resume``)."""
    identity = None if sample is None else {
        "rows": str(sample.rows_path), "pooling": sample.pooling, "dtype": sample.dtype,
        "drawn": hashlib.sha256(np.asarray([sample.first, sample.pieces], dtype=np.int64).tobytes()).hexdigest(),
    }  # fmt: skip
    return {"provenance": made_from, "measure": measure_params(measure), "parts": parts, "part": part,
            "sample": identity}  # fmt: skip
