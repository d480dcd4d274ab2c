"""Snakemake entry point: every model's tables and the similarity tables -> the atlas (atlas.csv/.md/.html,
atlas_curves.csv) and its two figures (contextuality.report.atlas, atlas_figures)."""

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.report.atlas import atlas_curves, atlas_rows, write_atlas_tables
from contextuality.report.atlas_figures import paths_by_format, plot_atlas, plot_atlas_cka
from contextuality.report.atlas_inputs import AtlasInputError, read_inputs
from contextuality.report.inert import from_inert_json

setup_job_logging(snakemake.log[0] if snakemake.log else None)
# labels are free text from the config: the rule may pass the models as inert JSON (report/inert.py)
models = snakemake.params.models
models = from_inert_json(models) if isinstance(models, str) else [dict(model) for model in models]
pairs = [tuple(pair) for pair in snakemake.params.pairs]
names = ("layers", "rogue", "losses", "records", "senses", "claims", "within", "pairs")
with expected_errors(AtlasInputError):
    inputs = read_inputs(models, pairs, {name: getattr(snakemake.input, name, []) for name in names})
rows, curves = atlas_rows(models, inputs), atlas_curves(models, inputs)
output = snakemake.output
write_atlas_tables(
    rows,
    curves,
    {"csv": output.csv, "md": output.md, "html": output.html, "curves": output.curves},
    variant=inputs.variant,
    senses_on=inputs.senses_on,
)
plot_atlas(curves, rows, paths_by_format(output.figure), senses_on=inputs.senses_on, variant=inputs.variant)
plot_atlas_cka(inputs.pairs, rows, paths_by_format(output.cka_figure), variant=inputs.variant)
