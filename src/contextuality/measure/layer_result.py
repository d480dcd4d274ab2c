"""One layer's measurement as a typed record (``LayerResult``), the columns of its tables, and its files.

``measure_layer`` returns a ``LayerResult``; the workflow's job writes it (``write_layer_results``: the
record as JSON, floats exact, the words table as parquet, the PC vectors as text) and the combining step
reads it back (``read_layer_results``) to build the model's tables (docs/data-contract.md). The JSON is an
intermediate file: only ``combine_layers`` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.measure.engine.panel import GEOMETRY_COLUMNS
from contextuality.static.embeddings import write_embedding_text
from contextuality.store.files import REBUILD_HINT, StoreError

WORD_COLUMNS = [
    "model",
    "word",
    "layer",
    "n",
    "self_similarity",
    "self_similarity_sampled",
    "mev",
    "mev_literal",
    "mev_centered",
]
LAYER_COLUMNS = [
    "model", "layer", "n_words", "n_sentences_sampled",
    "self_similarity", "self_similarity_ci_low", "self_similarity_ci_high",
    "intra_sentence", "intra_sentence_ci_low", "intra_sentence_ci_high",
    "mev", "mev_ci_low", "mev_ci_high", "mev_literal", "mev_centered",
    "baseline_cosine", "baseline_mev",
    "adjusted_self_similarity", "adjusted_intra_sentence", "adjusted_mev",
    "norm_mean", "norm_std",
    "self_similarity_sampled", "n_baseline_vectors",
    "baseline_cosine_exact", "baseline_cosine_exact_between", "baseline_cosine_uniform", "baseline_mev_exact",
    "adjusted_self_similarity_exact", "adjusted_intra_sentence_exact", "adjusted_mev_exact",
    "n_degenerate_words", "n_zero_vectors", "after_final_norm",
    *GEOMETRY_COLUMNS,
]  # fmt: skip
# The paper's measures per post-processing variant (results/metrics/{corpus}/{model}/postprocess.csv).
POSTPROCESS_COLUMNS = [
    "model", "layer", "postprocess", "self_similarity", "self_similarity_ci_low", "self_similarity_ci_high",
    "intra_sentence", "intra_sentence_ci_low", "intra_sentence_ci_high", "mev", "mev_ci_low", "mev_ci_high",
    "mev_literal", "mev_centered", "baseline_cosine", "baseline_mev", "baseline_cosine_exact", "baseline_mev_exact",
    "adjusted_self_similarity", "adjusted_intra_sentence", "adjusted_mev",
    "adjusted_self_similarity_exact", "adjusted_intra_sentence_exact", "adjusted_mev_exact", "n_degenerate_words",
]  # fmt: skip


class LayerShape(NamedTuple):
    """What a layer was measured on, checked against the model's manifest when its layers are combined."""

    rows: int
    dim: int


@dataclass(frozen=True, eq=False)
class LayerResult:
    """Everything one layer's measurement gives (``measure_layer``)."""

    row: dict  # one row of layers.parquet (LAYER_COLUMNS)
    words: pd.DataFrame  # the layer's rows of words.parquet (WORD_COLUMNS), plus "primary" (what the means average)
    pcs: np.ndarray | None  # (words, d): the PC static embeddings (pcs/layer_LL.txt); None when read back
    postprocess: list[dict]  # one row of postprocess.csv per post-processing variant (POSTPROCESS_COLUMNS)
    rogue: np.ndarray  # (d,) each dimension's contribution to the exact anisotropy A_p (NaN without geometry)
    shape: LayerShape

    @property
    def layer(self) -> int:
        return self.row["layer"]


def write_layer_results(
    result: LayerResult, out_record: Path, out_words: Path, out_pcs: Path, *, provenance_sha256: str = ""
) -> None:
    """One layer's results: its record (JSON, floats exact: its row, post-processing rows, rogue
    contributions, shape and ``provenance_sha256``, the digest of the manifest's provenance it was measured
    against), its words table (parquet), its PC vectors (text)."""
    record = {
        "row": result.row, "postprocess": result.postprocess, "rogue": [float(v) for v in result.rogue],
        "shape": result.shape._asdict(), "provenance_sha256": provenance_sha256,
    }  # fmt: skip
    with atomic_path(out_record) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n")
    with atomic_path(out_words) as tmp:
        result.words.to_parquet(tmp, index=False)
    write_embedding_text(Path(out_pcs), result.words["word"].to_numpy(), result.pcs)


def read_layer_results(record_path: Path, words_path: Path, manifest: dict | None = None, *,
                       against: str = "the manifest", hint: str = REBUILD_HINT) -> LayerResult:  # fmt: skip
    """A layer's results as ``write_layer_results`` wrote them (without the PC vectors). With a ``manifest``
    (``against`` names it), a record measured against another provenance is refused, saying ``hint`` (how to
    recover)."""
    record = json.loads(Path(record_path).read_text())
    if manifest is not None and record.get("provenance_sha256") != manifest["provenance_sha256"]:
        raise StoreError(
            f"{record_path}: provenance_sha256 is {record.get('provenance_sha256')!r}, but "
            f"{against} has {manifest['provenance_sha256']!r}: the layer was "
            f"measured on other rows; {hint}"
        )
    return LayerResult(
        record["row"], pd.read_parquet(words_path), None, record["postprocess"],
        np.asarray(record["rogue"], dtype=np.float64), LayerShape(**record["shape"]),
    )  # fmt: skip
