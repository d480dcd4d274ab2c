"""Snakemake entry point: a model's shard files + its plan's units -> its manifest (the vectors stay in the shards).

The shards must record what this run would extract now: the model's source.json, its plan's files and
the shard settings the extract rule is given."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.store.files import StoreError
from contextuality.store.provenance import shard_provenance
from contextuality.store.views import write_manifest

with script_job(snakemake, StoreError):
    write_manifest(
        [Path(path) for path in snakemake.input.shards],
        Path(snakemake.input.units),
        Path(snakemake.output.manifest),
        model=snakemake.wildcards.model,
        expected=shard_provenance(
            snakemake.wildcards.model,
            snakemake.params.shard,
            snakemake.input.record,
            snakemake.input.tokens,
            snakemake.input.units,
        ),
    )
