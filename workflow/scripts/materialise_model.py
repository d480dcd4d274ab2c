"""Snakemake entry point: a model's download (or, for 'random', the corpus) -> its model folder (as model.tar) + source.json."""

from pathlib import Path

from contextuality.core.archive import discard_unpacked, folder_of, pack, unpacked
from contextuality.core.runtime import script_job
from contextuality.core.settings import BuildSettings, Settings, from_params
from contextuality.models.loading import ModelError
from contextuality.models.sources import build, write_source_record

with script_job(snakemake, ModelError):
    record = build(
        snakemake.wildcards.model,
        from_params(BuildSettings, snakemake.params.build),
        folder_of(snakemake.output.model),
        download_dir=unpacked(snakemake.input.download) if snakemake.input.download else None,
        sentences_parquet=Path(snakemake.input.sentences) if snakemake.input.sentences else None,
        # how much free disk to insist on changes no output: a setting, not a param
        disk_factor=Settings.from_config(snakemake.config).extraction.min_free_disk_factor,
    )
    pack(folder_of(snakemake.output.model), snakemake.output.model)
    write_source_record(record, Path(snakemake.output.record))
    if snakemake.input.download:
        discard_unpacked(snakemake.input.download)  # the download tar is temp(): its folder goes with it
