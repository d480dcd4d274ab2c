"""Snakemake entry point: one layer of one model -> its record, its words table and its PC vectors."""
from pathlib import Path

import pandas as pd

from contextuality.core.settings import MeasureSettings, from_params
from contextuality.measure.analysis import measure_layer, write_layer_results
from contextuality.core.runtime import setup_job_logging
from contextuality.store.reader import read_manifest

log = setup_job_logging(snakemake.log[0])
settings = from_params(MeasureSettings, snakemake.params.measure)
result = measure_layer(
    Path(snakemake.input.layer),
    int(snakemake.wildcards.layer),
    pd.read_parquet(snakemake.input.occurrences),
    model=snakemake.wildcards.model,
    seed=settings.seed,
    intra_sentences=settings.intra_sentences,
    baseline_samples=settings.baseline_samples,
    self_similarity=settings.self_similarity,
    sampled_pairs=settings.sampled_pairs,
    mev_layer0=settings.mev_layer0,
    bootstrap_resamples=settings.bootstrap_resamples,
    manifest=read_manifest(snakemake.input.manifest),
    units=pd.read_parquet(snakemake.input.units, columns=["row", "unit", "position"]) if settings.geometry else None,
    geometry_panel=settings.geometry,
    geometry_sample=settings.geometry_sample,
    twonn_sample=settings.twonn_sample,
    postprocess=settings.postprocess,
    compute_dtype=settings.compute_dtype,
    log=log,
)
write_layer_results(result, Path(snakemake.output.record), Path(snakemake.output.words), Path(snakemake.output.pcs))
