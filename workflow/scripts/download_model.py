"""Snakemake entry point: one model's download settings -> resources/models/{model}/download/ (what its source needs)."""
from pathlib import Path

from contextuality.core.runtime import setup_job_logging
from contextuality.core.settings import DownloadSettings, from_params
from contextuality.models.sources import download

setup_job_logging(snakemake.log[0])
download(snakemake.wildcards.model, from_params(DownloadSettings, snakemake.params.download), Path(snakemake.output.download))
