"""A model's tables from its layers' results (``combine_layers``).

``combine_layers`` checks that the per-layer results (``LayerResult``) cover exactly the manifest's
layers and writes the model's words, layers, post-processing and rogue-dimension tables and its most and
least context-specific words (docs/data-contract.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.measure.device.parts import check_parts_against_run, rows_provenance, same_rows
from contextuality.measure.engine.panel import GEOMETRY_TEXT_COLUMNS
from contextuality.measure.layer_result import LAYER_COLUMNS, POSTPROCESS_COLUMNS, WORD_COLUMNS, LayerResult
from contextuality.store.files import StoreError
from contextuality.store.provenance import difference
from contextuality.store.reader import Manifest, check_layer_set, read_manifest

ROGUE_COLUMNS = ["model", "layer", "dimension", "rank", "contribution", "share"]
# What a store's manifest and a device measurement's records must share to describe the same rows (and the
# provenance, less what changes no row on the device: ``device_parts.same_rows``).
MEASURED_ON_KEYS = ("n_layers", "rows", "dim", "n_sentences")


def measured_on(
    paths: list[Path | str], store_manifest: Path | str | None = None, expected: dict | None = None
) -> Manifest:
    """What a model's layers were measured on: its manifest, or its device parts' records (which must agree, and
    with ``expected``, the provenance of the run's settings, weights and plan, match it), checked against the
    store's manifest when the run keeps one beside the device measurement."""
    records = [read_manifest(path) for path in paths]
    if expected is not None:
        check_parts_against_run(records, expected)
    if store_manifest:
        records.append(read_manifest(store_manifest))
    first = records[0]
    for other in records[1:]:
        differs = [
            (key, other.get(key), first.get(key)) for key in MEASURED_ON_KEYS if other.get(key) != first.get(key)
        ]
        if not differs and not same_rows(other, first):
            field, *values = difference(rows_provenance(other["provenance"]), rows_provenance(first["provenance"]))
            differs = [(f"provenance field {field}", *values)]
        if differs:
            key, value, wanted = differs[0]
            raise StoreError(
                f"{other.path}: {key} is {value!r}, but {first.path} has {wanted!r}: the two were made from other "
                f"plans, weights or settings; delete {other.path} and rerun snakemake, which rebuilds it"
            )
    return first


CONTEXT_WORD_COLUMNS = ["rank", "kind", "word", "mean_self_similarity", "n"]


def combine_layers(
    results: list[LayerResult],
    out_words: Path,
    out_layers: Path,
    out_context_words: Path,
    *,
    top_k: int,
    manifest: dict | None = None,
    manifest_path: Path | str = "manifest.json",
    out_postprocess: Path | None = None,
    out_rogue: Path | None = None,
    out_layers_csv: Path | None = None,
) -> None:
    """A model's tables from its per-layer results, after checking they cover exactly the manifest's layers.

    ``top_k``: how many most and least context-specific words to list. Also, when asked:
    ``out_postprocess`` (CSV, one row per layer and post-processing variant), ``out_rogue`` (CSV,
    ``rogue_table``) and ``out_layers_csv`` (the layer table of ``out_layers`` as CSV, 6 significant digits).
    """
    if manifest is not None:
        check_layer_set(manifest, {result.layer: result.shape._asdict() for result in results}, manifest_path)
    ordered = sorted(results, key=lambda result: result.layer)
    word_table, layer_table = layer_tables(ordered)
    with atomic_path(out_words) as tmp:
        word_table[WORD_COLUMNS].to_parquet(tmp, index=False)
    with atomic_path(out_layers) as tmp:
        layer_table.to_parquet(tmp, index=False)
    if out_layers_csv is not None:
        with atomic_path(out_layers_csv) as tmp:
            layer_table.to_csv(tmp, index=False, float_format="%.6g")
    with atomic_path(out_context_words) as tmp:
        _context_specific_words(word_table, top_k).to_csv(tmp, index=False)
    if out_postprocess is not None:
        rows = [row for result in ordered for row in result.postprocess]
        table = pd.DataFrame(rows, columns=POSTPROCESS_COLUMNS).astype(
            {"layer": "int64", "n_degenerate_words": "int64"}
        )
        with atomic_path(out_postprocess) as tmp:
            table.to_csv(tmp, index=False, float_format="%.6g")
    if out_rogue is not None:
        with atomic_path(out_rogue) as tmp:
            rogue_table(ordered).to_csv(tmp, index=False, float_format="%.6g")


def layer_tables(results: list[LayerResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The words table (every column of the layers' words tables) and the layer table (``LAYER_COLUMNS``) of
    per-layer results, in layer order, as words.parquet and layers.parquet hold them."""
    ordered = sorted(results, key=lambda result: result.layer)
    word_table = pd.concat([result.words for result in ordered], ignore_index=True).astype(
        {"layer": "int64", "n": "int64"}
    )
    layer_table = pd.DataFrame([result.row for result in ordered], columns=LAYER_COLUMNS).astype(
        {"layer": "int64", "n_words": "int64", "n_degenerate_words": "int64", "n_zero_vectors": "int64",
         "after_final_norm": "int64",
         "massive_occurrences": "int64", "geometry_sample": "int64", **{c: "str" for c in GEOMETRY_TEXT_COLUMNS}}
    )  # fmt: skip
    return word_table, layer_table


def rogue_table(results: list[LayerResult]) -> pd.DataFrame:
    """Each layer's per-dimension contributions to its exact anisotropy A_p, largest first (rank 1).

    ``share`` is the contribution over the layer's A_p (NaN when A_p is not above its isotropic noise,
    as the rogue shares are). Layers measured without the geometry panel have no rows.
    """
    frames = []
    for result in results:
        contributions = np.asarray(result.rogue, dtype=np.float64)
        if not len(contributions) or not np.isfinite(contributions).any():
            continue
        order = np.argsort(-contributions, kind="stable")
        total = float(np.sum(contributions))
        usable = np.isfinite(result.row.get("rogue_top1_share", np.nan))
        frames.append(pd.DataFrame({
            "model": result.row["model"], "layer": result.layer, "dimension": order,
            "rank": np.arange(1, len(order) + 1), "contribution": contributions[order],
            "share": contributions[order] / total if usable else np.nan,
        }))  # fmt: skip
    if not frames:
        return pd.DataFrame(columns=ROGUE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[ROGUE_COLUMNS]


def _context_specific_words(words: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The ``top_k`` words with the lowest and highest mean self-similarity over layers >= 1."""
    upper = words[words["layer"] >= 1].dropna(subset=["primary"])
    means = (
        upper.groupby("word", sort=True).agg(mean_self_similarity=("primary", "mean"), n=("n", "first")).reset_index()
    )
    ordered = means.sort_values(["mean_self_similarity", "word"], kind="stable")
    most = ordered.head(top_k).assign(kind="most_context_specific")
    least = ordered.iloc[::-1].head(top_k).assign(kind="least_context_specific")
    table = pd.concat([most.assign(rank=np.arange(1, len(most) + 1)), least.assign(rank=np.arange(1, len(least) + 1))])
    return table[CONTEXT_WORD_COLUMNS].reset_index(drop=True)
