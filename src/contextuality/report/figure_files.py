"""What every figure file is: its formats, their fixed metadata and the per-model figures' names.

No import beyond the standard library and ``core``: the Snakefile reads the names at every start. The
figures across models are named in ``paper.FIGURES`` (the paper's Figures 1-4) and
``senses.combine.SENSE_FIGURES``; each figure is written once per format in ``FORMATS``, by ``save_figure``.
"""

from __future__ import annotations

import os

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
