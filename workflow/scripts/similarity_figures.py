"""Snakemake entry point: the study corpus's similarity tables -> each model's heat maps and each pair's."""

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.measure.similarity.tables import read_table
from contextuality.report.figure_files import FORMATS
from contextuality.report.inert import from_inert_json
from contextuality.report.similarity_figures import draw_model_similarity, draw_pairs_similarity
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
labels = from_inert_json(snakemake.params.labels)
with expected_errors(StoreError):
    for model, path in zip(snakemake.params.models, snakemake.input.within):
        paths = {ext: snakemake.output[f"{model}_{ext}"] for ext in FORMATS}
        draw_model_similarity(read_table(path), labels.get(model, model), paths)
    draw_pairs_similarity(
        [read_table(path) for path in snakemake.input.pairs],
        labels,
        {ext: snakemake.output[f"pairs_{ext}"] for ext in FORMATS},
    )
