"""The columns of one model's sense tables (``senses.job`` writes them; the report reads them)."""

from __future__ import annotations

# The long table's columns: one row per measure and preprocessing of one layer (``senses.layer_job.Rows``).
ROW_COLUMNS = ["model", "layer", "family", "measure", "preprocessing", "value", "null", "ci_low", "ci_high", "p", "n",
               "note"]
