"""How a run's models line up with the paper's: which paper model each stands for, whether it is that
model's own checkpoint or a stand-in, and how its layers map to the paper's when its depth differs.

A model of another depth than its paper model is compared by relative depth: one layer at the nearest
paper layer (the summary), a range of paper layers as the run's layers covering it (the claims).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from contextuality.paper import PAPER_CHECKPOINTS, PAPER_DEPTH, PAPER_LABELS, PAPER_MODELS, is_paper_checkpoint


def model_depth(table: pd.DataFrame) -> int:
    """A run's number of contextual layers L (its largest layer index), comparable to PAPER_DEPTH."""
    return int(table["layer"].max())


def check_paper_models(layer_tables: dict, paper_models: dict) -> None:
    """Fail early on a paper model name other than elmo, bert, gpt2 or None."""
    for model in layer_tables:
        pm = paper_models.get(model)
        if pm is not None and pm not in PAPER_MODELS:
            raise ValueError(f"paper model of {model!r} is {pm!r}; expected one of {sorted(PAPER_MODELS)} or None")


def nearest_paper_layer(layer: int, depth: int, paper_depth: int) -> int:
    """The paper layer at the same relative depth (rounded half up)."""
    return layer if depth == paper_depth else min(paper_depth, math.floor(layer * paper_depth / depth + 0.5))


def mapped_span(first: int, last: int, depth: int, paper_depth: int) -> tuple[int, int, str]:
    """The layers of a model of ``depth`` covering paper layers first..last of a paper model of ``paper_depth``,
    and a note when they are mapped (another depth)."""
    if depth == paper_depth:
        return first, last, ""
    lo, hi = -(-first * depth // paper_depth), last * depth // paper_depth
    return lo, hi, f"relative depth: paper layers {first}-{last} of {paper_depth} → layers {lo}-{hi} of {depth}"


def model_role(
    model: str, label: str, depth: int, paper_model: str | None, identity: Mapping[str, str | None] | None
) -> tuple[bool, str]:
    """Whether the model stands in for (is not) its paper model, and one sentence saying which it is.

    ``identity``: the model's source and what names its weights (the workflow's MODEL_SOURCES); without it
    (or with any other checkpoint) the model is a stand-in.
    """
    if paper_model is None:
        return False, f"{label} has no counterpart in the paper: only the general claims apply."
    name, ckpt, pdepth = PAPER_LABELS[paper_model], PAPER_CHECKPOINTS[paper_model], PAPER_DEPTH[paper_model]
    if is_paper_checkpoint(paper_model, identity) and depth == pdepth:
        return False, f"{label} is the paper's own {name} checkpoint ({ckpt})."
    text = (
        f"{label} stands in for {name}: the paper's claims are about {ckpt} ({pdepth} layers); "
        f"{label} has {depth} layers"
    )
    text += "." if depth == pdepth else ", so layer ranges are mapped by relative depth."
    return True, text
