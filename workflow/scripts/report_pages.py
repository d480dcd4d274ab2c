"""Snakemake entry point: the answers (claims, summary, Table 1, the losses) and each model's tables as HTML pages
that Snakemake's report displays (contextuality.report.html)."""

from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import setup_job_logging
from contextuality.report.html import markdown_html, model_page, page, table_page
from contextuality.report.inert import from_inert_json

setup_job_logging(snakemake.log[0])


def write(path, title, markdown):
    with atomic_path(path) as tmp:
        Path(tmp).write_text(page(title, markdown_html(markdown)), encoding="utf-8")


if snakemake.rule == "model_pages":
    label = from_inert_json(snakemake.params.label)  # inert in report.html's parameters (report/inert.py)
    senses = pd.read_csv(snakemake.input.senses[0]) if snakemake.input.senses else None
    layers = pd.read_csv(snakemake.input.layers)
    write(snakemake.output.layers, f"{label}: per layer", model_page(label, layers, senses))
    for name, title in (("postprocess", "post-processing"), ("context_words", "the most context-specific words")):
        table = pd.read_csv(snakemake.input[name])
        write(snakemake.output[name], f"{label}: {title}", table_page(f"{label}: {title}", table))
else:
    for name, title in (
        ("claims", "The paper's claims, checked"),
        ("summary", "This run beside the paper"),
        ("table1", "Table 1: static embeddings"),
    ):
        sources = snakemake.input.get(name)
        if sources:
            source = sources if isinstance(sources, str) else sources[0]
            write(snakemake.output[name], title, Path(source).read_text(encoding="utf-8"))
    title = "Occurrences each model could not measure"
    write(snakemake.output.losses, title, table_page(title, pd.read_csv(snakemake.input.losses)))
