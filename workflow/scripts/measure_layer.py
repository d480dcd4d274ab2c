"""Snakemake entry point: one layer of one model -> its record, its words table and its PC vectors."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.core.settings import MeasureSettings, from_params
from contextuality.measure.engine.streaming import sweep_stale_spills
from contextuality.measure.layer_job import OccurrenceIndex, measure_layer, read_units
from contextuality.measure.layer_result import write_layer_results
from contextuality.store.files import StoreError
from contextuality.store.reader import read_manifest

log = setup_job_logging(snakemake.log[0])
settings = from_params(MeasureSettings, snakemake.params.measure)
scratch = Path(snakemake.output.record).parent  # a layer over metrics.memory_mb spills its occurrences here
for stale in sweep_stale_spills(scratch):  # a killed job's spill: nothing else would ever remove it
    log.info("removed %s, the occurrence spill of a measurement that did not finish", stale)
with expected_errors(StoreError):  # a damaged, stale or non-finite layer: its one line
    manifest = read_manifest(snakemake.input.manifest)
    result = measure_layer(
        Path(snakemake.input.layer),
        int(snakemake.wildcards.layer),
        OccurrenceIndex.from_parquet(snakemake.input.occurrences),  # within metrics.memory_mb whatever the corpus
        settings,
        model=snakemake.wildcards.model,
        manifest=manifest,
        units=read_units(snakemake.input.units) if settings.geometry else None,
        scratch=scratch,
        log=log,
    )
write_layer_results(
    result,
    Path(snakemake.output.record),
    Path(snakemake.output.words),
    Path(snakemake.output.pcs),
    provenance_sha256=manifest["provenance_sha256"],
)
