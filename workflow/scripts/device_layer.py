"""Snakemake entry point: one layer's record, words table and PC vectors, taken out of its device part's tar."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.measure.device.parts import take_layer_files
from contextuality.store.files import StoreError

with script_job(snakemake, StoreError):
    take_layer_files(
        Path(snakemake.input.part),
        int(snakemake.wildcards.layer),
        {
            "record": Path(snakemake.output.record),
            "words": Path(snakemake.output.words),
            "pcs": Path(snakemake.output.pcs),
        },
    )
