"""Snakemake entry point: one model's download settings -> resources/models/{model}/download.tar (what its source needs)."""

from contextuality.core.archive import folder_of, pack
from contextuality.core.runtime import script_job
from contextuality.core.settings import DownloadSettings, from_params
from contextuality.models.loading import ModelError
from contextuality.models.sources import download

with script_job(snakemake, ModelError):
    settings = from_params(DownloadSettings, snakemake.params.download)
    folder = folder_of(snakemake.output.download)
    download(snakemake.wildcards.model, settings, folder)
    pack(folder, snakemake.output.download)
