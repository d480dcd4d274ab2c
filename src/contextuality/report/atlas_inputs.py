"""The atlas's inputs, read and checked as they are read: every model's ``layers.csv``, ``rogue_dimensions.csv``,
``losses.json``, ``source.json`` and ``senses/layers.csv``, the run's ``claims.csv``, and the similarity tables
(each model's within-model ``layers.csv``, each pair's ``pairs/{A}__{B}.csv``: one row per pair of layers and
variant; docs/data-contract.md). A value outside its range, a missing column or a table of another model stops
the atlas with one line naming the file and the column: a report across six models should not average a wrong
number in silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

# Rounding of float32 products (a cosine of 1.0000001) is not a range violation.
TOLERANCE = 1e-6
TRAININGS = ("pretrained", "sentence-encoder", "instruct", "random", "unknown")
# The input lists of the atlas rule, each in the order of the models (``pairs``: of the pairs).
PER_MODEL = ("layers", "rogue", "losses", "records")
OPTIONAL_PER_MODEL = ("senses", "within")  # empty when the run has no senses / no similarity stage
# The similarity variant the atlas reads: rows L2-normalised before centring where the tables have it (a
# decoder's massive activations, one dimension carried by few rows, otherwise decide raw CKA), else the raw rows.
PREFERRED_VARIANTS = ("unit_rows", "raw")

COSINE, ADJUSTED = (-1.0, 1.0), (-2.0, 2.0)  # an adjusted cosine is a cosine minus a cosine
SHARE = (0.0, 1.0)
LAYER_RANGES = {
    "baseline_cosine_exact": COSINE,
    "self_similarity": COSINE,
    "self_similarity_ci_low": COSINE,
    "self_similarity_ci_high": COSINE,
    "intra_sentence": COSINE,
    "intra_sentence_ci_low": COSINE,
    "intra_sentence_ci_high": COSINE,
    "adjusted_self_similarity_exact": ADJUSTED,
    "adjusted_intra_sentence_exact": ADJUSTED,
    "mev": SHARE,
    "mev_ci_low": SHARE,
    "mev_ci_high": SHARE,
    "baseline_mev_exact": SHARE,
    "adjusted_mev_exact": COSINE,
}
# A dimension's contribution C_k is a mean of x_k y_k / (|x| |y|); its share C_k / A_p has no bound (C_k < 0 exist).
ROGUE_RANGES = {"rank": (1.0, math.inf), "contribution": COSINE}
# Checked on the AUROC rows the atlas reads (the sense table's other measures have other ranges).
SENSE_RANGES = {"value": SHARE, "ci_low": SHARE, "ci_high": SHARE}
SENSE_MEASURES = ("auroc_same_sense", "auroc_shape")
# Debiased CKA is a cosine of U-centred kernels: in [-1, 1], near 0 or slightly below for unrelated layers.
SIMILARITY_RANGES = {
    "depth_a": SHARE,
    "depth_b": SHARE,
    "cka_biased": SHARE,
    "cka_debiased": COSINE,
    "mutual_knn": SHARE,
}
VERDICTS = ("HOLDS", "FAILS", "PARTLY", "MIXED", "INCONCLUSIVE", "N/A")


class AtlasInputError(ValueError):
    """An input of the atlas that cannot be what its file claims to be: the message names the file and column."""


@dataclass(frozen=True)
class AtlasInputs:
    """Every table the atlas reads, by model key (``pairs``: by (A, B)), each already checked."""

    layers: dict[str, pd.DataFrame]
    rogue: dict[str, pd.DataFrame]
    losses: dict[str, dict]
    records: dict[str, dict]
    senses: dict[str, pd.DataFrame] = field(default_factory=dict)  # empty: senses off
    claims: pd.DataFrame | None = None
    within: dict[str, pd.DataFrame] = field(default_factory=dict)  # empty: no similarity stage
    pairs: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)

    @property
    def senses_on(self) -> bool:
        return bool(self.senses)

    @cached_property
    def variant(self) -> str | None:
        """The similarity variant every table has (unit_rows, else raw); None without similarity tables."""
        tables = [*self.within.values(), *self.pairs.values()]
        if not tables:
            return None
        for variant in PREFERRED_VARIANTS:
            if all(variant in set(table["variant"]) for table in tables):
                return variant
        raise AtlasInputError(f"the similarity tables share none of the variants {list(PREFERRED_VARIANTS)}")


def check_ranges(frame: pd.DataFrame, ranges: Mapping[str, tuple[float, float]], where: str) -> None:
    """Every value of each column of ``ranges`` a number within its range (NaN allowed: a measure not defined)."""
    for column, (low, high) in ranges.items():
        if column not in frame.columns:
            raise AtlasInputError(f"{where}: no column {column!r}")
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
        not_numbers = frame[column].notna().to_numpy() & np.isnan(values)
        outside = (values < low - TOLERANCE) | (values > high + TOLERANCE) | np.isinf(values)
        bad = np.flatnonzero(not_numbers | outside)
        if bad.size:
            row = int(bad[0])
            layer = f" (layer {frame['layer'].iloc[row]})" if "layer" in frame.columns else ""
            raise AtlasInputError(
                f"{where}: column {column!r} holds {frame[column].iloc[row]!r} in row {row}{layer}, outside "
                f"[{low:g}, {high:g}] ({bad.size} such value{'s' if bad.size > 1 else ''})"
            )


def _one_model(frame: pd.DataFrame, key: str, where: str, column: str = "model") -> None:
    if column not in frame.columns:
        raise AtlasInputError(f"{where}: no column {column!r}")
    others = sorted(set(frame[column].astype(str)) - {key})
    if others:
        raise AtlasInputError(f"{where}: column {column!r} names {others}, not the model {key!r} it is given for")


def _layers_within(frame: pd.DataFrame, n_layers: int, where: str, columns=("layer",)) -> None:
    for column in columns:
        if column not in frame.columns:
            raise AtlasInputError(f"{where}: no column {column!r}")
        layers = frame[column].to_numpy()
        if len(layers) and (layers.min() < 0 or layers.max() > n_layers - 1):
            raise AtlasInputError(
                f"{where}: column {column!r} holds layers {layers.min()}..{layers.max()}; source.json says "
                f"{n_layers} layers (0..{n_layers - 1})"
            )


def _whole_number(path: str | Path, name: str, value: object, least: int, what: str) -> None:
    """``value`` (``name`` in ``path``) an int of at least ``least``, not a bool; else the error says it is not ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise AtlasInputError(f"{path}: {name!r} is {value!r}, not {what}")


def read_record(path: str | Path, key: str) -> dict:
    """``source.json``: its shape and the keys the atlas needs beyond it (``lm_kind``, ``n_parameters``)."""
    record = json.loads(Path(path).read_text())
    if record.get("key", key) != key:
        raise AtlasInputError(f"{path}: key {record['key']!r}, not the model {key!r} it is given for")
    if "n_parameters" not in record:
        raise AtlasInputError(f"{path}: no 'n_parameters' (written by materialise_model: rebuild the model's record)")
    if "model_type" in record and "lm_kind" not in record:  # a Hugging Face folder's (ELMo's records neither)
        raise AtlasInputError(f"{path}: no 'lm_kind' (written by materialise_model: rebuild the model's record)")
    for name, least in (("n_layers", 2), ("dim", 1), ("n_parameters", 1)):
        _whole_number(path, name, record.get(name), least, f"a whole number of at least {least}")
    return record


def read_layers(path: str | Path, key: str, n_layers: int) -> pd.DataFrame:
    """``layers.csv``: one row per layer 0..L-1, the measures the atlas reads within their ranges."""
    table = pd.read_csv(path)
    _one_model(table, key, str(path))
    check_ranges(table, LAYER_RANGES, str(path))
    if sorted(table["layer"]) != list(range(n_layers)):
        raise AtlasInputError(f"{path}: column 'layer' holds {sorted(table['layer'])}, not 0..{n_layers - 1}")
    return table.sort_values("layer").reset_index(drop=True)


def read_rogue(path: str | Path, key: str, n_layers: int) -> pd.DataFrame:
    """``rogue_dimensions.csv``: each layer's dimensions by contribution (no rows without the geometry panel)."""
    table = pd.read_csv(path)
    _one_model(table, key, str(path))
    check_ranges(table, ROGUE_RANGES | {"share": (-math.inf, math.inf)}, str(path))
    _layers_within(table, n_layers, str(path))
    return table


def read_losses(path: str | Path, key: str) -> dict:
    losses = json.loads(Path(path).read_text())
    if losses.get("model", key) != key:
        raise AtlasInputError(f"{path}: model {losses['model']!r}, not {key!r}")
    if not isinstance(losses.get("words_lost"), dict):
        raise AtlasInputError(f"{path}: no 'words_lost' by reason")
    counts = {"units": losses.get("units"), **{f"words_lost.{k}": v for k, v in losses["words_lost"].items()}}
    for name, value in counts.items():
        _whole_number(path, name, value, 0, "a count")
    return losses


def read_senses(path: str | Path, key: str, n_layers: int) -> pd.DataFrame:
    """``senses/layers.csv``: the rows of every measure; the AUROC rows the atlas reads within [0, 1]."""
    table = pd.read_csv(path)
    _one_model(table, key, str(path))
    _layers_within(table, n_layers, str(path))
    for column in ("measure", "preprocessing"):
        if column not in table.columns:
            raise AtlasInputError(f"{path}: no column {column!r}")
    check_ranges(table[table["measure"].isin(SENSE_MEASURES)], SENSE_RANGES, f"{path} (AUROC rows)")
    return table


def read_claims(path: str | Path) -> pd.DataFrame:
    """``claims.csv``; "N/A" is a verdict here, not a missing value."""
    table = pd.read_csv(path, keep_default_na=False, dtype=str)
    for column in ("model", "claim", "status"):
        if column not in table.columns:
            raise AtlasInputError(f"{path}: no column {column!r}")
    unknown = sorted(set(table["status"]) - set(VERDICTS) - {""})
    if unknown:
        raise AtlasInputError(f"{path}: column 'status' holds {unknown}, not verdicts {list(VERDICTS)}")
    return table


def read_similarity(path: str | Path, model_a: str, model_b: str, layers_a: int, layers_b: int) -> pd.DataFrame:
    """A similarity table (within a model: A = B): one row per (layer pair, variant), values within range."""
    table = pd.read_csv(path, keep_default_na=True)
    where = str(path)
    _one_model(table, model_a, where, "model_a")
    _one_model(table, model_b, where, "model_b")
    if "variant" not in table.columns:
        raise AtlasInputError(f"{where}: no column 'variant'")
    _layers_within(table, layers_a, where, ("layer_a",))
    _layers_within(table, layers_b, where, ("layer_b",))
    check_ranges(table, SIMILARITY_RANGES, where)
    for side, n_layers in (("a", layers_a), ("b", layers_b)):
        # a table of another depth than the model's record (a stale table beside a rebuilt model)
        off = np.abs(table[f"depth_{side}"] - table[f"layer_{side}"] / (n_layers - 1)) > TOLERANCE
        if off.any():
            row = table[off].iloc[0]
            raise AtlasInputError(
                f"{where}: column 'depth_{side}' holds {row[f'depth_{side}']!r} for layer {row[f'layer_{side}']}, "
                f"not its relative depth among {n_layers} layers"
            )
    return table


def _listed(files: Mapping[str, object], name: str) -> list[str]:
    """One input list: Snakemake gives a named input of one file as a string."""
    value = files.get(name, [])
    return [value] if isinstance(value, str | Path) else [str(path) for path in value]


def read_inputs(models: Sequence[Mapping], pairs: Sequence[Sequence[str]], files: Mapping[str, object]) -> AtlasInputs:
    """Read and check every input of the atlas (``files``: the atlas rule's named input lists)."""
    keys = [model["key"] for model in models]
    lists = {name: _listed(files, name) for name in (*PER_MODEL, *OPTIONAL_PER_MODEL, "claims", "pairs")}
    for name in PER_MODEL + OPTIONAL_PER_MODEL:
        if len(lists[name]) != len(keys) and not (name in OPTIONAL_PER_MODEL and not lists[name]):
            raise AtlasInputError(f"input {name!r}: {len(lists[name])} files for {len(keys)} models {keys}")
    if len(lists["pairs"]) != len(pairs) or any(a not in keys or b not in keys or a == b for a, b in pairs):
        raise AtlasInputError(f"input 'pairs': {len(lists['pairs'])} files for the pairs {pairs} of models {keys}")
    _check_models(models)
    pairs = [tuple(pair) for pair in pairs]
    records = {key: read_record(path, key) for key, path in zip(keys, lists["records"])}
    depth = {key: record["n_layers"] for key, record in records.items()}
    inputs = AtlasInputs(
        layers={key: read_layers(path, key, depth[key]) for key, path in zip(keys, lists["layers"])},
        rogue={key: read_rogue(path, key, depth[key]) for key, path in zip(keys, lists["rogue"])},
        losses={key: read_losses(path, key) for key, path in zip(keys, lists["losses"])},
        records=records,
        senses={key: read_senses(path, key, depth[key]) for key, path in zip(keys, lists["senses"])},
        claims=read_claims(lists["claims"][0]) if lists["claims"] else None,
        within={
            key: read_similarity(path, key, key, depth[key], depth[key]) for key, path in zip(keys, lists["within"])
        },
        pairs={(a, b): read_similarity(path, a, b, depth[a], depth[b]) for (a, b), path in zip(pairs, lists["pairs"])},
    )
    inputs.variant  # noqa: B018 (refuses tables that share no variant here, with the other input errors)
    return inputs


def _check_models(models: Sequence[Mapping]) -> None:
    keys = [model.get("key") for model in models]
    if len(set(keys)) != len(keys) or not all(isinstance(key, str) and key for key in keys):
        raise AtlasInputError(f"params 'models': keys {keys} are not distinct names")
    for model in models:
        if model.get("training") not in TRAININGS:
            raise AtlasInputError(
                f"params 'models': training of {model['key']!r} is {model.get('training')!r}, not one of {TRAININGS}"
            )
