"""The columns of one model's sense tables (``senses.job`` writes them; the report reads them) and the names of the
sense figures: no import beyond the standard library, as the Snakefile reads them at every start."""

from __future__ import annotations

# The long table's columns: one row per measure and preprocessing of one layer (``senses.rows.Rows``).
ROW_COLUMNS = [
    "model",
    "layer",
    "family",
    "measure",
    "preprocessing",
    "value",
    "null",
    "ci_low",
    "ci_high",
    "p",
    "n",
    "note",
]

# The figures across models (rule senses_figures; report.sense_figures draws them)
SENSE_FIGURES = ("sense_separation", "sense_baselines", "logit_lens", "polysemy")
