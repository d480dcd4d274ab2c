"""Snakemake entry point: a model's download (or, for 'random', the corpus) -> its model folder + source.json."""
from pathlib import Path

from contextuality.models.sources import build, write_source_record
from contextuality.core.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
record = build(
    snakemake.wildcards.model,
    dict(snakemake.params.spec),
    Path(snakemake.output.model),
    download_dir=Path(snakemake.input.download) if snakemake.input.download else None,
    sentences_parquet=Path(snakemake.input.sentences) if snakemake.input.sentences else None,
    seed=snakemake.params.seed or 0,
    disk_factor=snakemake.config["extraction"]["min_free_disk_factor"],
)
write_source_record(record, Path(snakemake.output.record))
