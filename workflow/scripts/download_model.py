"""Snakemake entry point: one config model entry -> resources/models/{model}/download/ (what its source needs)."""
from pathlib import Path

from contextuality.models.sources import download
from contextuality.core.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
download(snakemake.wildcards.model, dict(snakemake.params.spec), Path(snakemake.output.download))
