"""The sense figures at the report's width: no empty logit-lens panel for a model without an output layer."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pandas as pd

from contextuality.report.sense_figures import sense_figures
from contextuality.senses.combine import SENSE_FIGURES


def _table(with_lens: bool) -> pd.DataFrame:
    rows = []
    for layer in range(4):
        rows.append(
            {
                "measure": "auroc_same_sense",
                "preprocessing": "centred",
                "layer": layer,
                "value": 0.5 + 0.03 * layer,
                "ci_low": 0.48,
                "ci_high": 0.6 + 0.03 * layer,
                "null": 0.5,
                "family": "separation",
                "note": None,
            }
        )
        for name in ("next_token", "own_token"):
            rows.append(
                {
                    "measure": f"{name}_median_rank",
                    "preprocessing": "hidden",
                    "layer": layer,
                    "value": 100.0 / (layer + 1) if with_lens else np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "null": 5000.0 if with_lens else np.nan,
                    "family": "output_layer",
                    "note": None if with_lens else "no output layer: an encoder without a language-model head",
                }
            )
    return pd.DataFrame(rows)


def test_the_logit_lens_draws_only_models_with_an_output_layer(tmp_path):
    outputs = {f"{name}_{ext}": str(tmp_path / f"{name}.{ext}") for name in SENSE_FIGURES for ext in ("png", "pdf")}
    sense_figures({"dec": _table(True), "enc": _table(False)}, {"dec": "Decoder", "enc": "Encoder"}, outputs, "layer")
    width = {name: matplotlib.image.imread(outputs[f"{name}_png"]).shape[1] for name in SENSE_FIGURES}
    assert width["logit_lens"] * 2 == width["sense_separation"]  # one panel, not two
    outputs_none = {key: str(tmp_path / f"none_{key}") for key in outputs}
    outputs_none = {key: value[:-4] + "." + key.rsplit("_", 1)[1] for key, value in outputs_none.items()}
    sense_figures({"enc": _table(False)}, {"enc": "Encoder"}, outputs_none, "layer")  # none has one: its note drawn
    assert matplotlib.image.imread(outputs_none["logit_lens_png"]).shape[1] == width["logit_lens"]
