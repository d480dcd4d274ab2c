"""A finished run's tables, as the findings text reads them (``report.findings``).

``RunTables.load(results)`` reads ``results/tables/claims.csv`` and ``table1.csv`` and, per model of the claims
table (in its order), ``results/metrics/{corpus}/{model}/layers.csv``, ``postprocess.csv``,
``rogue_dimensions.csv`` and ``senses/layers.csv`` (the last three optional). Each accessor returns what one
sentence of the findings needs; a missing table or row gives None or an empty series, and the sentence is left out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

HOLDS, FAILS, NA = "HOLDS", "FAILS", "N/A"


class FindingsError(ValueError):
    """A run or a target file that the findings cannot be written from or into."""


@dataclass
class Model:
    """One model of the run: its key, label, the paper model it stands in for (or None) and its tables."""

    key: str
    label: str
    paper_model: str | None
    layers: pd.DataFrame
    postprocess: pd.DataFrame | None = None
    rogue: pd.DataFrame | None = None
    senses: pd.DataFrame | None = None

    @property
    def decoder(self) -> bool:
        """A model whose stand-in role is GPT-2's, or whose senses table has B5 (a decoder's measure)."""
        if self.paper_model == "gpt2":
            return True
        return self.senses is not None and self.sense("prediction_alignment_median_rank").notna().any()

    def curve(self, column: str) -> pd.Series:
        """A column of layers.csv by layer (empty where the column is absent)."""
        if column not in self.layers.columns:
            return pd.Series(dtype=float)
        return self.layers.set_index("layer")[column].sort_index().astype(float)

    def sense_rows(self, measure: str, preprocessing: str = "centred") -> pd.DataFrame:
        """The senses table's rows of ``measure`` by layer (empty where absent)."""
        if self.senses is None:
            return pd.DataFrame(columns=["value", "null", "ci_low", "ci_high", "p", "n", "note"])
        table = self.senses
        if preprocessing not in set(table.loc[table["measure"] == measure, "preprocessing"]):
            preprocessing = "hidden"  # the output layer's measures are on the stored vectors
        sub = table[(table["measure"] == measure) & (table["preprocessing"] == preprocessing)]
        return sub.set_index("layer").sort_index()

    def sense(self, measure: str, preprocessing: str = "centred") -> pd.Series:
        """One sense measure's values by layer (empty where absent)."""
        return self.sense_rows(measure, preprocessing)["value"].astype(float)


@dataclass
class RunTables:
    """The tables of one run the findings are written from."""

    claims: pd.DataFrame
    models: list[Model]
    table1: pd.DataFrame | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)

    def verdict(self, model: Model, claim: str) -> str | None:
        """HOLDS, FAILS or N/A of ``claim`` on ``model`` in claims.csv (None: not checked)."""
        rows = self.claims[(self.claims["model"] == model.key) & (self.claims["claim"] == claim)]
        return str(rows["status"].iloc[0]) if len(rows) else None

    def stand_in(self, paper_model: str) -> Model | None:
        """The first model standing in for ``paper_model`` (bert, gpt2, elmo), if any."""
        return next((m for m in self.models if m.paper_model == paper_model), None)

    @classmethod
    def load(cls, results: Path, corpus: str = "sts") -> RunTables:
        results = Path(results)
        claims_path = results / "tables" / "claims.csv"
        if not claims_path.is_file():
            raise FindingsError(f"{claims_path}: not there; name a finished run's results folder")
        # keep_default_na=False: a verdict "N/A" is text, not a missing value
        claims = pd.read_csv(claims_path, keep_default_na=False, dtype=str)
        models = []
        for key in dict.fromkeys(claims["model"]):
            folder = results / "metrics" / corpus / key
            if not (folder / "layers.csv").is_file():
                raise FindingsError(f"{folder / 'layers.csv'}: not there; the run is not finished")
            rows = claims[claims["model"] == key]
            paper = [p for p in rows["paper_model"] if p]
            models.append(
                Model(
                    key=key,
                    label=rows["label"].iloc[0],
                    paper_model=paper[0] if paper else None,
                    layers=pd.read_csv(folder / "layers.csv"),
                    postprocess=_optional(folder / "postprocess.csv"),
                    rogue=_optional(folder / "rogue_dimensions.csv"),
                    senses=_optional(folder / "senses" / "layers.csv"),
                )
            )
        return cls(claims, models, _optional(results / "tables" / "table1.csv"), source=str(results))


def _optional(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.is_file() else None


def markers(name: str) -> tuple[str, str]:
    """The HTML comments around a generated block: ``<!-- {name}:begin -->`` and ``<!-- {name}:end -->``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_block(text: str, block: str, where: str, name: str) -> str:
    """``text`` with the part between ``name``'s markers replaced by ``block``; both markers must be there once."""
    begin, end = markers(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise FindingsError(
            f"{where}: holds {text.count(begin)} '{begin}' and {text.count(end)} '{end}'; allowed: one of each, "
            f"in that order; add them around the {name} block and rerun"
        )
    head, rest = text.split(begin)
    return f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"


def update_files(targets: list[tuple[Path | None, dict]], check: bool) -> list[str]:
    """Each (file, {marker name: block}) rewritten (``check``: left as it is); the files whose blocks were stale."""
    stale = []
    for path, blocks in targets:
        if path is None:
            continue
        if not path.is_file():
            raise FindingsError(f"{path}: not there; name the findings page or README to update")
        text = path.read_text()
        updated = text
        for name, block in blocks.items():
            updated = replace_block(updated, block, str(path), name)
        if updated != text and check:
            stale.append(str(path))
        elif updated != text:
            from contextuality.report.tables import write_text

            write_text(path, updated)
    return stale


def update_exit_status(
    program: str, source: Path, targets: Callable[[], list[tuple[Path | None, dict]]], check: bool
) -> int:
    """A findings command's exit status: ``update_files(targets(), check)``, then 0 (done, or nothing stale), 1 (with
    ``check``: a block stale against ``source``) or 2 (a run or a file the blocks cannot be made from or written
    into), the reason on stderr after ``program``'s name. ``targets`` reads the run, so its errors count too."""
    try:
        stale = update_files(targets(), check)
    except FindingsError as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 2
    if stale:
        print(f"{program}: stale against {source}: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def each(models: list[Model], text: Callable[[Model], str | None], joiner: str = "and", long: bool = False) -> str:
    """One value per model with the model's label: "0.631 (MiniLM) and 0.613 (SmolLM2)"; ``long``: a clause per
    model, "MiniLM: ...; SmolLM2: ..."."""
    values = [(m.label, value) for m in models if (value := text(m)) is not None]
    if long:
        return "; ".join(f"{label}: {value}" for label, value in values)
    parts = [f"{value} ({label})" for label, value in values]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" {joiner} " + parts[-1]


def best_layer(model: Model) -> int | None:
    """The layer above the input where same-sense pairs are best told apart (the AUROC's largest)."""
    auroc = model.sense("auroc_same_sense").iloc[1:].dropna()
    return int(auroc.idxmax()) if len(auroc) else None


def at_layer(model: Model, measure: str, layer: int | None) -> pd.Series | None:
    rows = model.sense_rows(measure)
    if layer is None or layer not in rows.index or pd.isna(rows.loc[layer, "value"]):
        return None
    return rows.loc[layer]


def measured(model: Model, measure: str) -> pd.Series | None:
    """A measure at the model's best layer, or None."""
    return at_layer(model, measure, best_layer(model))
