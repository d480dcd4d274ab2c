"""Snakemake entry point: one layer of one model -> its record, its words table and its PC vectors."""
from pathlib import Path

import pandas as pd

from contextuality.measure.analysis import measure_layer, write_layer_results
from contextuality.core.runtime import setup_job_logging
from contextuality.store.reader import read_manifest

log = setup_job_logging(snakemake.log[0])
metrics = snakemake.params.metrics
result = measure_layer(
    Path(snakemake.input.layer),
    int(snakemake.wildcards.layer),
    pd.read_parquet(snakemake.input.occurrences),
    model=snakemake.wildcards.model,
    seed=snakemake.params.seed,
    intra_sentences=metrics["intra_sentences"],
    baseline_samples=metrics["baseline_samples"],
    self_similarity=metrics["self_similarity"],
    sampled_pairs=metrics["sampled_pairs"],
    mev_layer0=metrics["mev_layer0"],
    bootstrap_resamples=metrics["bootstrap_resamples"],
    manifest=read_manifest(snakemake.input.manifest),
    units=pd.read_parquet(snakemake.input.units, columns=["row", "unit", "position"]) if metrics["geometry"] else None,
    geometry_panel=metrics["geometry"],
    geometry_sample=metrics["geometry_sample"],
    twonn_sample=metrics["twonn_sample"],
    postprocess=metrics["postprocess"],
    compute_dtype=metrics["compute_dtype"],
    log=log,
)
write_layer_results(result, Path(snakemake.output.record), Path(snakemake.output.words), Path(snakemake.output.pcs))
