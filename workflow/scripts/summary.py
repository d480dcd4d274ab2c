"""Snakemake entry point: per-layer and per-word tables and Table 1 -> summary (vs the paper) and claims report
(contextuality.report.run_reports)."""

from contextuality.core.runtime import setup_job_logging
from contextuality.report.inert import from_inert_json
from contextuality.report.run_reports import read_run_tables, write_run_reports

setup_job_logging(snakemake.log[0])
inputs, params = snakemake.input, snakemake.params
run = read_run_tables(params.models, inputs.layers, inputs.words, inputs.losses, inputs.senses, inputs.table1,
                      inputs.corpus)  # fmt: skip
write_run_reports(run, from_inert_json(params.labels), params.paper_models, snakemake.output,
                  sources=from_inert_json(params.sources), trainings=params.trainings)  # fmt: skip
