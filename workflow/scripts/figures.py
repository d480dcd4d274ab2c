"""Snakemake entry point: every model's per-layer table -> Figures 1-4 (PNG, PDF and the page of each)."""

from pathlib import Path

import pandas as pd

from contextuality.core.runtime import setup_job_logging
from contextuality.report.figure_files import page_path
from contextuality.report.figures import plot_all
from contextuality.report.inert import from_inert_json

setup_job_logging(snakemake.log[0])
tables = {model: pd.read_parquet(path) for model, path in zip(snakemake.params.models, snakemake.input.layers)}
written = plot_all(
    tables,
    from_inert_json(snakemake.params.labels),
    Path(snakemake.output[0]).parent,
    relative_depth=snakemake.params.x_axis == "relative_depth",
)
expected = {Path(path) for path in snakemake.output}
assert {path for png, pdf in written.values() for path in (png, pdf, page_path(png))} == expected, (
    "figure names out of step with the rule"
)
