"""Snakemake entry point: one model's per-layer sense rows and word rows -> its sense tables."""
from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.senses.combine import combine_senses
from contextuality.store.files import StoreError
from contextuality.store.reader import read_manifest

setup_job_logging(snakemake.log[0])
with expected_errors(StoreError):
    manifest = read_manifest(snakemake.input.manifest)
    combine_senses(list(snakemake.input.rows), list(snakemake.input.words), int(manifest["n_layers"]),
                   snakemake.input.manifest, Path(snakemake.output.layers), Path(snakemake.output.words))
