"""Snakemake entry point: bundled STS release files -> scored pairs (JSON lines)."""

from pathlib import Path

from contextuality.core.runtime import script_job
from contextuality.corpus.sts import CorpusError, write_bundled_pairs

with script_job(snakemake, CorpusError):
    write_bundled_pairs(
        Path(snakemake.input.release_dir),
        years=snakemake.params.years,
        include_2012_train=snakemake.params.include_2012_train,
        out_jsonl=Path(snakemake.output.pairs),
    )
