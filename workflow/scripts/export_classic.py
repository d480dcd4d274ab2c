"""Snakemake entry point: per-layer files -> the classic one-dataset-per-sentence HDF5 + word2sent.json."""

from pathlib import Path

import pandas as pd

from contextuality.core.runtime import script_job
from contextuality.core.settings import Settings
from contextuality.store.export import export_classic
from contextuality.store.files import StoreError
from contextuality.store.reader import read_manifest

with script_job(snakemake, StoreError):
    export_classic(
        [Path(path) for path in snakemake.input.layers],
        pd.read_parquet(snakemake.input.occurrences),
        Path(snakemake.output.embeddings),
        Path(snakemake.output.word2sent),
        disk_factor=Settings.from_config(snakemake.config).extraction.min_free_disk_factor,  # changes no output
        sentences=pd.read_parquet(snakemake.input.sentences, columns=["sentence_id", "text"]),
        manifest=read_manifest(snakemake.input.manifest),
    )
