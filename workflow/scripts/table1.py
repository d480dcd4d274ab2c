"""Snakemake entry point: all benchmark scores -> Table 1 (CSV, Markdown, LaTeX) and score-by-layer figure."""

import pandas as pd

from contextuality.core.runtime import setup_job_logging
from contextuality.report.inert import from_inert_json
from contextuality.report.table1 import build_table1, plot_scores_by_layer

setup_job_logging(snakemake.log[0])
results = pd.concat([pd.read_csv(path) for path in [*snakemake.input.scores, *snakemake.input.baselines]])
# the scores are keyed by model key; display names are applied here (baselines keep their own label)
labels = from_inert_json(snakemake.params.labels)
results["model"] = results["model"].map(lambda key: labels.get(key, key))
build_table1(results, snakemake.output.csv, snakemake.output.md, snakemake.output.tex)
plot_scores_by_layer(results, snakemake.output.png, snakemake.output.pdf)
