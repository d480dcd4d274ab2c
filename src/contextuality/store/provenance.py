"""What made a shard, a layer file or a layer's record (its provenance), and the checks that refuse a mismatch.

A shard records, as the JSON attribute ``provenance``: the model key, its weights digest and the digest
of its ``source.json``, the digest of the plan files it was extracted from (``tokens.parquet`` and
``units.parquet``), and every shard setting that changes what it stores (pooling, indexing, tokenization,
max_length, dtypes, number of shards, ...; not the batches or the device: ``core.settings.HOW_IT_RAN``).
Every shard of a model records the same set;
its own index is the attribute ``shard``. The manifest keeps the set and its digest; layer files copy
it, and each layer's record carries the digest. Every reader compares what it reads with the manifest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from contextuality.core.digest import sha256_of
from contextuality.store.files import StoreError

ATTRIBUTE = "provenance"
# where each recorded field comes from, to say what a mismatch disagrees with
ORIGINS = {"model": "the model key", "weights_sha256": "source.json", "source_sha256": "source.json's digest",
           "plan_sha256": "the plan (tokens.parquet, units.parquet)"}  # fmt: skip
_MISSING = "(not recorded)"


def plan_sha256(tokens_path: str | Path, units_path: str | Path) -> str:
    """One digest of the plan files a shard is extracted from (``tokens.parquet`` and ``units.parquet``)."""
    return digest({"tokens": sha256_of(tokens_path), "units": sha256_of(units_path)})


def shard_provenance(
    model: str, stored: dict, record_path: str | Path, tokens_path: str | Path, units_path: str | Path
) -> dict:
    """What every shard of ``model`` is made from: its weights, its plan and the shard settings that change what it
    stores (``stored``: ``core.settings.stored_params``, the extract rule's params)."""
    record = json.loads(Path(record_path).read_text())
    return normalised({
        "model": model, "weights_sha256": record.get("weights_sha256", ""), "source_sha256": sha256_of(record_path),
        "plan_sha256": plan_sha256(tokens_path, units_path),
        **stored,
    })  # fmt: skip


def encode(provenance: dict) -> str:
    return json.dumps(provenance, sort_keys=True)


def normalised(provenance: dict) -> dict:
    """As it reads back from a file (JSON: tuples become lists)."""
    return json.loads(encode(provenance))


def digest(provenance: dict) -> str:
    """The SHA-256 of the provenance's canonical JSON (what a layer's record carries)."""
    return hashlib.sha256(encode(provenance).encode()).hexdigest()


def read(attrs, path: Path) -> dict:
    """The provenance an HDF5 file's attributes record ({} when it records none)."""
    try:
        return json.loads(attrs.get(ATTRIBUTE, "{}"))
    except ValueError as err:
        raise StoreError(f"{path}: unreadable provenance attribute ({err}); delete it and rerun snakemake") from None


def difference(found: dict, expected: dict) -> tuple[str, object, object] | None:
    """The first field (in name order) whose value differs, with the two values; None if none does."""
    for field in sorted(set(found) | set(expected)):
        if found.get(field, _MISSING) != expected.get(field, _MISSING):
            return field, found.get(field, _MISSING), expected.get(field, _MISSING)
    return None


def refuse_mismatch(path: Path, found: dict, expected: dict, against: str, hint: str) -> None:
    """Raise one line naming ``path``, the first differing field and both values, unless they agree.

    ``against`` names what holds ``expected`` (another shard, the manifest); ``None`` names the origin of
    the field (the config's shard settings, source.json or the plan), for the manifest rule.
    """
    differs = difference(found, expected)
    if differs is None:
        return
    field, value, wanted = differs
    origin = against or ORIGINS.get(field, f"the config (shard setting {field})")
    raise StoreError(
        f"{path}: {field} is {value!r}, but {origin} has {wanted!r}: it was made by another "
        f"model, plan or setting; {hint}"
    )
