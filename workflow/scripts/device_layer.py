"""Snakemake entry point: one layer's record, words table and PC vectors, taken out of its device part's tar."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.measure.device.parts import take_layer_files
from contextuality.store.files import StoreError

setup_job_logging(snakemake.log[0])
with expected_errors(StoreError):
    take_layer_files(
        Path(snakemake.input.part),
        int(snakemake.wildcards.layer),
        {
            "record": Path(snakemake.output.record),
            "words": Path(snakemake.output.words),
            "pcs": Path(snakemake.output.pcs),
        },
    )
