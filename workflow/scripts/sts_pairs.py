"""Snakemake entry point: bundled STS release files -> scored pairs (JSON lines)."""

from pathlib import Path

from contextuality.core.runtime import expected_errors, setup_job_logging
from contextuality.corpus.sts import CorpusError, write_bundled_pairs

setup_job_logging(snakemake.log[0])
with expected_errors(CorpusError):
    write_bundled_pairs(
        Path(snakemake.input.release_dir),
        years=snakemake.params.years,
        include_2012_train=snakemake.params.include_2012_train,
        out_jsonl=Path(snakemake.output.pairs),
    )
