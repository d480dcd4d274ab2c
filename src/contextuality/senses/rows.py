"""The long table of one layer's sense measures (``Rows``), and the preprocessings every measure is taken on."""

from __future__ import annotations

import numpy as np
import pandas as pd

from contextuality.senses.combine import ROW_COLUMNS

PREPROCESSINGS = ("centred", "standardised")


class Rows:
    """The long table of one layer's measures."""

    def __init__(self, model: str, layer: int):
        self.model, self.layer, self.rows = model, layer, []

    def add(
        self,
        family: str,
        measure: str,
        preprocessing: str,
        value,
        *,
        null=np.nan,
        ci=(np.nan, np.nan),
        p=np.nan,
        n=0,
        note: str = "",
    ) -> None:
        self.rows.append(
            [
                self.model,
                self.layer,
                family,
                measure,
                preprocessing,
                _float(value),
                _float(null),
                _float(ci[0]),
                _float(ci[1]),
                _float(p),
                int(n) if np.isfinite(n) else 0,
                note,
            ]
        )

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=ROW_COLUMNS)


def _float(value) -> float:
    return float("nan") if value is None else float(value)
