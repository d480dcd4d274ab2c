"""One model's sense tables: the per-layer rows of ``measure_senses`` joined, after checking they cover every layer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.store.files import StoreError

# The long table's columns: one row per measure and preprocessing of one layer (``senses.layer_job.Rows``).
ROW_COLUMNS = ["model", "layer", "family", "measure", "preprocessing", "value", "null", "ci_low", "ci_high", "p", "n",
               "note"]


def combine_senses(row_paths: list[str], word_paths: list[str], n_layers: int, manifest_path: str,
                   out_layers: Path, out_words: Path) -> pd.DataFrame:
    """One model's per-layer sense rows and word rows, refused unless they cover exactly layers 0..n-1."""
    rows = pd.concat([pd.read_csv(path, keep_default_na=True) for path in row_paths], ignore_index=True)
    found = sorted(rows["layer"].unique().tolist())
    if found != list(range(n_layers)):
        raise StoreError(f"sense rows cover layers {found} but {manifest_path} has {n_layers} layers; delete "
                         "results/metrics/<model>/senses/ and rerun snakemake")
    if list(rows.columns) != ROW_COLUMNS:
        raise StoreError(f"sense rows have columns {list(rows.columns)}, expected {ROW_COLUMNS}; rerun measure_senses")
    rows = rows.sort_values(["layer", "family", "measure", "preprocessing"], kind="stable").reset_index(drop=True)
    words = pd.concat([pd.read_parquet(path) for path in word_paths], ignore_index=True)
    with atomic_path(out_layers) as tmp:
        rows.to_csv(tmp, index=False)
    with atomic_path(out_words) as tmp:
        words.to_parquet(tmp, index=False)
    return rows
