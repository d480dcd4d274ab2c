"""Snakemake entry point: one model's tables -> its geometry dashboard and rogue-dimension figures."""

import pandas as pd

from contextuality.core.runtime import setup_job_logging
from contextuality.report.inert import from_inert_json
from contextuality.report.model_figures import plot_geometry_dashboard, plot_rogue_dimensions

setup_job_logging(snakemake.log[0])
layers = pd.read_parquet(snakemake.input.layers)
label = from_inert_json(snakemake.params.label)
relative_depth = snakemake.params.x_axis == "relative_depth"
plot_geometry_dashboard(
    layers,
    pd.read_csv(snakemake.input.postprocess),
    label,
    snakemake.output.geometry_png,
    snakemake.output.geometry_pdf,
    relative_depth=relative_depth,
)
plot_rogue_dimensions(
    pd.read_csv(snakemake.input.rogue),
    layers,
    label,
    snakemake.output.rogue_dimensions_png,
    snakemake.output.rogue_dimensions_pdf,
    relative_depth=relative_depth,
)
