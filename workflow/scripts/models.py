"""Snakemake entry point: one config model entry -> resources/models/{model}/ + source.json."""
from pathlib import Path

from contextuality.models import materialise, write_source_record
from contextuality.runtime import setup_job_logging

setup_job_logging(snakemake.log[0])
record_path = Path(snakemake.output.record)
record = materialise(
    snakemake.wildcards.model,
    dict(snakemake.params.spec),
    record_path.parent,
    sentences_parquet=Path(snakemake.input.sentences) if snakemake.input.sentences else None,
    seed=snakemake.params.seed,
)
write_source_record(record, record_path)
