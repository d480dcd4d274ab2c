"""The one line refusing a layer that holds a NaN or an infinity.

``layer_pass.layer_pass`` finds one (from the squared row norms it forms anyway, before any eigen-solve)
and names its row; ``non_finite_error`` then names, for the person running the workflow, the layer
file, the first such row, its sentence and word, how many rows there are, and the way out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader


def non_finite_error(path: Path, layer: int, X: np.ndarray, offsets: np.ndarray, index, row: int, *,
                     first_row: int = 0, sentence_ids: np.ndarray | None = None,
                     remedy: str | None = None) -> StoreError:  # fmt: skip
    """The error for layer ``layer`` (file ``path``, rows ``X`` as measured) where ``row`` was found not finite.

    ``index``: the occurrence index (``layer_job.OccurrenceIndex``), for the row's word. A full scan of X,
    on this failure path only. Without a NaN or an infinity in X, ``row``'s squared norm overflowed the
    work dtype: the line says to measure in float64. ``X`` may be a chunk of the layer, its rows the
    layer's from ``first_row`` on (``row`` is the layer's); its counts are then the chunk's.
    ``sentence_ids``: the sentences' corpus ids, where no layer file lists them (rows measured on a device);
    ``remedy``: the way out, where it is not re-extracting the store (rows the job computed itself).
    """
    bad = np.flatnonzero(~np.isfinite(X).all(axis=1))
    row = int(bad[0]) + first_row if len(bad) else row
    local = row - first_row
    sentence = int(np.searchsorted(offsets, row, side="right") - 1)
    if sentence_ids is not None:
        sentence_id = int(sentence_ids[sentence])
    else:
        with LayerReader(path) as reader:  # the sentence's corpus id, where the file lists them
            ids = reader.handle.get("sentence_ids")
            sentence_id = int(ids[sentence]) if ids is not None else sentence
    at = np.flatnonzero(index.rows == row)
    word = f", word {index.words[np.searchsorted(index.group_starts, at[0], side='right') - 1]!r}" if len(at) else ""
    where = f"{path}: layer {layer}, row {row} (sentence {sentence_id}{word})"
    if not len(bad):
        return StoreError(
            f"{where} has values up to {float(np.abs(X[local]).max()):.3g}, whose squares overflow {X.dtype}: measure "
            "in float64 (metrics.compute_dtype: float64)"
        )
    value = X[local][~np.isfinite(X[local])][0]
    whole = first_row == 0 and len(X) == offsets[-1]
    share = f"{len(bad)} of the layer's {len(X)} rows" if whole else f"{len(bad)} of the {len(X)} rows read with it"
    remedy = remedy or (
        "delete the model's shards and rerun snakemake to re-extract them (extraction refuses non-finite values, "
        "naming the sentence and layer where the model produced them)"
    )
    return StoreError(
        f"{where} holds {value} ({share} hold NaN or infinity); the measures need finite vectors: {remedy}"
    )
