"""Snakemake entry point: every model's sense tables -> sense separation, logit-lens and polysemy figures."""

import pandas as pd

from contextuality.core.runtime import setup_job_logging
from contextuality.report.inert import from_inert_json
from contextuality.report.sense_figures import sense_figures

setup_job_logging(snakemake.log[0])
tables = {model: pd.read_csv(path) for model, path in zip(snakemake.params.models, snakemake.input.layers)}
sense_figures(tables, from_inert_json(snakemake.params.labels), dict(snakemake.output.items()), snakemake.params.x_axis)
