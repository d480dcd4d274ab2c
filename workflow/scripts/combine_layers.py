"""Snakemake entry point: a model's per-layer results -> its words/layers/post-processing/rogue tables and
context-specific words."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.measure.combine import combine_layers, measured_on
from contextuality.measure.device.parts import parts_hint
from contextuality.measure.layer_result import read_layer_results
from contextuality.store.files import REBUILD_HINT, StoreError
from contextuality.store.provenance import shard_provenance

with script_job(snakemake, StoreError):
    on_device = snakemake.params.get("rows") is not None
    # on the device path, what the run's settings, weights and plan would make: each part's record must match it
    expected = None
    if on_device:
        record, tokens, units = snakemake.input.made_from
        expected = shard_provenance(snakemake.wildcards.model, snakemake.params.rows, record, tokens, units)
    # the store's manifest, or the device parts' records (and the manifest, when the run stores too)
    manifest = measured_on(list(snakemake.input.measured_on), snakemake.input.store_manifest or None, expected)
    # a layer file made from another part record comes back from the same tar: measure the parts again instead
    against, hint = (str(manifest.path), parts_hint(manifest.path)) if on_device else ("the manifest", REBUILD_HINT)
    combine_layers(
        [
            read_layer_results(record, words, manifest, against=against, hint=hint)
            for record, words in zip(snakemake.input.records, snakemake.input.words)
        ],
        Path(snakemake.output.words),
        Path(snakemake.output.layers_parquet),
        Path(snakemake.output.context_words),
        top_k=snakemake.params.top_k,
        manifest=manifest,
        manifest_path=manifest.path,
        out_postprocess=Path(snakemake.output.postprocess),
        out_rogue=Path(snakemake.output.rogue),
        out_layers_csv=Path(snakemake.output.layers),
    )
