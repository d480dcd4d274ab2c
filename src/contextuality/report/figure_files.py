"""What every figure file is: its formats, their fixed metadata and the per-model figures' names.

No import beyond the standard library and ``core``: the Snakefile reads the names at every start. The
figures across models are named in ``paper.FIGURES`` (the paper's Figures 1-4) and
``senses.combine.SENSE_FIGURES``; each figure is written once per format in ``FORMATS``, by ``save_figure``,
with its page beside its PNG (``page_path``): what the report shows, the PNG in place and the PDF its download.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from contextuality.core.atomic import atomic_path

# Every figure is written in each of these formats (the rules declare one output per name and format).
FORMATS = ("png", "pdf")
# No date or software version in a file: a rerun writes the same bytes.
METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None}}
# Each model's own figures (rule model_figures; report.model_figures draws them).
MODEL_FIGURES = ("geometry", "rogue_dimensions")


def save_figure(fig, paths: dict[str, str | os.PathLike], *, dpi: int, **options) -> None:
    """Write ``fig`` once per format in ``FORMATS`` (``paths``: format -> file), each to a temporary file then
    renamed into place; ``options`` go to ``savefig``."""
    for fmt in FORMATS:
        with atomic_path(paths[fmt]) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=METADATA[fmt], **options)
    write_page(paths["png"], paths["pdf"])


def page_path(png: str | os.PathLike) -> Path:
    """A figure's page for the report: beside its PNG, the same name, ``.page.html`` (no table's page beside it)."""
    return Path(png).with_suffix(".page.html")


def write_page(png: str | os.PathLike, pdf: str | os.PathLike) -> Path:
    """The figure's page (``page_path``): its PNG shown, its PDF a download. Snakemake's report shows a PDF in a
    frame or downloads it, depending on the browser, and a figure filed in both formats is listed twice; one page
    per figure shows the PNG first. Both files are inside the page (data: URIs): the page fetches nothing."""
    from contextuality.report.html import page  # here: the Snakefile reads this module's names at every start

    png, pdf = Path(png), Path(pdf)
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    vector = base64.b64encode(pdf.read_bytes()).decode("ascii")
    body = (
        f'<p class="download"><a download="{pdf.name}" href="data:application/pdf;base64,{vector}">'
        f"Download {pdf.name}</a> (the same figure as vector graphics, for print)</p>\n"
        f'<img class="figure" alt="{png.stem}" src="data:image/png;base64,{image}">'
    )
    with atomic_path(page_path(png)) as tmp:
        Path(tmp).write_text(page(png.stem, body), encoding="utf-8")
    return page_path(png)
