"""Snakemake entry point: a model's shard files -> one layer's file (a virtual dataset over the shards)."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.store.files import StoreError
from contextuality.store.reader import read_manifest
from contextuality.store.views import write_layer_file

with script_job(snakemake, StoreError):
    write_layer_file(
        [Path(path) for path in snakemake.input.shards],
        int(snakemake.wildcards.layer),
        Path(snakemake.output.layer),
        read_manifest(snakemake.input.manifest),
        snakemake.input.manifest,
    )
