"""The atlas: every model of a run side by side on relative depth (layer / (L - 1), 0 the input layer, 1 the last),
as one table (``atlas.csv``, one row per model; ``.md`` and ``.html`` for people and the report) and the curves
its figure draws (``atlas_curves.csv``, long format).

Inputs are read and checked by ``report.atlas_inputs``; the figures are ``report.atlas_figures``. The adjusted
measures here are raw minus the *exact* baselines (``baseline_*_exact``: every row, no sampling), so the
anisotropy column and the adjustment are one number. The similarity columns read one variant of the similarity
tables (``AtlasInputs.variant``: ``unit_rows`` where every table has it, else ``raw``), named in the captions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.report.atlas_inputs import AtlasInputs
from contextuality.report.html import markdown_html, page
from contextuality.report.senses import SENSE_CLAIMS, layer_series
from contextuality.report.tables import fmt, md_text, pipe_table, write_text

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
SENSE_CLAIM_IDS = tuple(SENSE_CLAIMS)  # W1, W2, W3a, W3b, W3c, W4: each its own verdict column
SENSES_AUROC = ("auroc_same_sense", "centred")
SENSES_SHAPE = ("auroc_shape", "centred")

# The curves of atlas_curves.csv (and the atlas figure's panels): the layers.csv column, and the CI columns of the
# raw measure with the baseline that shifts them onto the adjusted one.
LAYER_CURVES = {
    "anisotropy": ("baseline_cosine_exact", None, None),
    "self_similarity_adj": ("adjusted_self_similarity_exact", "self_similarity", "baseline_cosine_exact"),
    "intra_sentence_adj": ("adjusted_intra_sentence_exact", "intra_sentence", "baseline_cosine_exact"),
    "mev_adj": ("adjusted_mev_exact", "mev", "baseline_mev_exact"),
}
CURVE_MEASURES = (*LAYER_CURVES, "senses_auroc", "senses_auroc_shape", "cka_last_layer")
CURVE_COLUMNS = ("model", "layer", "relative_depth", "measure", "value", "ci_low", "ci_high")


def column_docs(variant: str | None = None) -> dict[str, str]:
    """What each column of atlas.csv means, in its order, as Markdown (``variant``: the similarity variant read)."""
    cka = f"debiased CKA (similarity tables, variant `{variant or 'none'}`)"
    docs = {
        "model": "the model's key in the config",
        "label": "its label",
        "kind": "encoder, decoder (a causal LM: left context only) or bilstm (ELMo), from source.json `lm_kind`",
        "training": "pretrained, sentence-encoder, instruct, random (an untrained control) or unknown",
        "n_layers": "layers L, the input layer (0) included",
        "dim": "vector size",
        "params_m": "parameters, millions (source.json `n_parameters`)",
        "rows": "stored rows: words, or subword pieces (losses.json `units`)",
        "words_lost": "words the model could not store: truncated, skipped or spanned (losses.json `words_lost`)",
    }
    for depth in DEPTHS:
        docs[f"anisotropy_d{round(depth * 100)}"] = f"anisotropy at relative depth {depth:g} (nearest layer)"
    docs["anisotropy_d0"] = "anisotropy (`baseline_cosine_exact`: mean cosine of two random words) at the input layer"
    docs |= {
        "anisotropy_max": "the largest anisotropy over layers",
        "anisotropy_max_depth": "its relative depth",
        "rogue_top3_share_max": "largest share of a layer's anisotropy carried by 3 dimensions (rogue_dimensions.csv)",
        "self_similarity_adj_min": "the lowest self-similarity minus anisotropy (`adjusted_self_similarity_exact`)",
        "self_similarity_adj_min_depth": "its relative depth",
        "self_similarity_adj_top": "adjusted self-similarity at the last layer",
        "intra_sentence_adj_top": "intra-sentence similarity minus anisotropy at the last layer",
        "mev_max": "the largest maximum explainable variance minus its baseline (`adjusted_mev_exact`)",
        "mev_max_depth": "its relative depth",
        "senses_auroc_best": "best same- vs different-sense AUROC of the cosine (`auroc_same_sense`, centred)",
        "senses_auroc_best_depth": "its relative depth",
        "senses_auroc_shape": "AUROC of the sentences' shape alone, no model (`auroc_shape`, at the best layer)",
    }
    docs |= {f"senses_{claim}": f"verdict of sense claim {claim} (claims.csv)" for claim in SENSE_CLAIM_IDS}
    docs |= {
        "cka_adjacent_mean": f"mean {cka} of layers ℓ and ℓ+1",
        "cka_first_last": f"{cka} of the input and the last layer",
        "closest_model": f"the other model with the highest {cka} of any layer pair",
        "closest_cka": "that grid maximum",
        "mutual_knn_best": "the highest mutual k-NN overlap (`mutual_knn`) of any layer pair with any other model (same variant)",
    }
    return docs


ATLAS_COLUMNS = tuple(column_docs())


def relative_depth(layer, n_layers: int):
    """ℓ / (L - 1): 0 the input layer, 1 the last."""
    return layer / (n_layers - 1)


def nearest_layer(depth: float, n_layers: int) -> int:
    """The layer at the relative depth nearest to ``depth`` (half up, as ``paper_models.nearest_paper_layer``)."""
    return min(n_layers - 1, math.floor(depth * (n_layers - 1) + 0.5))


def model_kind(record: dict) -> str:
    """encoder or decoder from source.json's ``lm_kind`` (decided at the build by ``models.kind``, its one home);
    bilstm for a model that is no Hugging Face folder (ELMo's options and weights: its record has no model type)."""
    if "model_type" not in record:
        return "bilstm"
    return "decoder" if record["lm_kind"] == "causal" else "encoder"


def _extreme(values: pd.Series, largest: bool) -> tuple[float, int | None]:
    """The largest (or smallest) finite value of a series by layer, and its layer (NaN, None if none; ties: the
    first layer)."""
    finite = values[np.isfinite(values.to_numpy(float))]
    if finite.empty:
        return math.nan, None
    layer = finite.idxmax() if largest else finite.idxmin()
    return float(finite.loc[layer]), int(layer)


def _with_depth(extreme: tuple[float, int | None], n_layers: int) -> tuple[float, float]:
    value, layer = extreme
    return value, math.nan if layer is None else relative_depth(layer, n_layers)


def _at(values: pd.Series, layer: int) -> float:
    return float(values.get(layer, math.nan))


def _describe(model: Mapping, record: dict, losses: dict) -> dict:
    return {
        "model": model["key"],
        "label": model.get("label", model["key"]),
        "kind": model_kind(record),
        "training": model["training"],
        "n_layers": record["n_layers"],
        "dim": record["dim"],
        "params_m": record["n_parameters"] / 1e6,
        "rows": losses["units"],
        "words_lost": sum(losses["words_lost"].values()),
    }


def _layer_columns(layers: pd.DataFrame, rogue: pd.DataFrame, n_layers: int) -> dict:
    by_layer = layers.set_index("layer")
    anisotropy = by_layer["baseline_cosine_exact"]
    out = {f"anisotropy_d{round(d * 100)}": _at(anisotropy, nearest_layer(d, n_layers)) for d in DEPTHS}
    out["anisotropy_max"], out["anisotropy_max_depth"] = _with_depth(_extreme(anisotropy, True), n_layers)
    top3 = rogue[rogue["rank"] <= 3].pivot_table(index="layer", columns="rank", values="share", dropna=False)
    # a layer's top-3 share is NaN where its shares are (anisotropy not above its isotropic null)
    shares = top3.sum(axis=1, skipna=False) if len(top3.columns) == 3 else pd.Series(dtype=float)
    out["rogue_top3_share_max"] = float(shares.max()) if shares.notna().any() else math.nan
    self_adj = by_layer["adjusted_self_similarity_exact"]
    out["self_similarity_adj_min"], out["self_similarity_adj_min_depth"] = _with_depth(
        _extreme(self_adj, False), n_layers
    )
    out["self_similarity_adj_top"] = _at(self_adj, n_layers - 1)
    out["intra_sentence_adj_top"] = _at(by_layer["adjusted_intra_sentence_exact"], n_layers - 1)
    out["mev_max"], out["mev_max_depth"] = _with_depth(_extreme(by_layer["adjusted_mev_exact"], True), n_layers)
    return out


def _sense_columns(key: str, inputs: AtlasInputs, n_layers: int) -> dict:
    """The sense columns: NaN throughout when the run has no senses."""
    out = dict.fromkeys(
        ["senses_auroc_best", "senses_auroc_best_depth", "senses_auroc_shape"]
        + [f"senses_{claim}" for claim in SENSE_CLAIM_IDS],
        math.nan,
    )
    if not inputs.senses_on:
        return out
    table = inputs.senses[key]
    auroc, shape = layer_series(table, *SENSES_AUROC), layer_series(table, *SENSES_SHAPE)
    best = _extreme(auroc, True)
    out["senses_auroc_best"], out["senses_auroc_best_depth"] = _with_depth(best, n_layers)
    if best[1] is not None:  # the shape alone reads no layer: one flat line, read where the cosine is best
        out["senses_auroc_shape"] = _at(shape, best[1])
    if inputs.claims is not None:
        verdicts = inputs.claims[inputs.claims["model"] == key].set_index("claim")["status"]
        for claim in SENSE_CLAIM_IDS:
            if verdicts.get(claim, ""):
                out[f"senses_{claim}"] = verdicts[claim]
    return out


def _variant_rows(table: pd.DataFrame, variant: str) -> pd.DataFrame:
    return table[table["variant"] == variant]


def _similarity_columns(key: str, order: Sequence[str], inputs: AtlasInputs, n_layers: int) -> dict:
    """Within the model: adjacent layers and first vs last; across models: the closest model by its grid maximum."""
    out = dict.fromkeys(["cka_adjacent_mean", "cka_first_last", "closest_cka", "mutual_knn_best"], math.nan)
    out["closest_model"] = math.nan
    variant = inputs.variant
    if key in inputs.within:
        within = _variant_rows(inputs.within[key], variant)
        adjacent = within[within["layer_b"] == within["layer_a"] + 1]
        out["cka_adjacent_mean"] = float(adjacent["cka_debiased"].mean()) if len(adjacent) else math.nan
        first_last = within[(within["layer_a"] == 0) & (within["layer_b"] == n_layers - 1)]["cka_debiased"]
        out["cka_first_last"] = float(first_last.iloc[0]) if len(first_last) else math.nan
    grid_max, knn_max = {}, []
    for (a, b), table in inputs.pairs.items():
        if key in (a, b):
            rows = _variant_rows(table, variant)
            grid_max[b if a == key else a] = rows["cka_debiased"].max()
            knn_max.append(rows["mutual_knn"].max())
    finite = {other: value for other, value in grid_max.items() if np.isfinite(value)}
    if finite:
        # ties: the first in the run's order of models
        best = max(sorted(finite, key=order.index), key=lambda other: finite[other])
        out["closest_model"], out["closest_cka"] = best, float(finite[best])
    if knn_max and np.isfinite(knn_max).any():
        out["mutual_knn_best"] = float(np.nanmax(knn_max))
    return out


def atlas_rows(models: Sequence[Mapping], inputs: AtlasInputs) -> pd.DataFrame:
    """One row per model (``models``: dicts with ``key``, ``label``, ``training``), the columns of ``ATLAS_COLUMNS``."""
    order = [model["key"] for model in models]
    rows = []
    for model in models:
        key = model["key"]
        n_layers = inputs.records[key]["n_layers"]
        rows.append(
            _describe(model, inputs.records[key], inputs.losses[key])
            | _layer_columns(inputs.layers[key], inputs.rogue[key], n_layers)
            | _sense_columns(key, inputs, n_layers)
            | _similarity_columns(key, order, inputs, n_layers)
        )
    return pd.DataFrame(rows, columns=list(ATLAS_COLUMNS))


def _curve(key: str, measure: str, layers, values, low, high, n_layers: int) -> pd.DataFrame:
    layers = np.asarray(layers, int)
    frame = pd.DataFrame(
        {
            "model": key,
            "layer": layers,
            "relative_depth": relative_depth(layers.astype(float), n_layers),
            "measure": measure,
            "value": np.asarray(values, float),
            "ci_low": np.asarray(low, float),
            "ci_high": np.asarray(high, float),
        }
    )
    return frame[np.isfinite(frame["value"])]


def _model_curves(key: str, inputs: AtlasInputs) -> list[pd.DataFrame]:
    n_layers = inputs.records[key]["n_layers"]
    layers = inputs.layers[key]
    nan = np.full(len(layers), np.nan)
    curves = []
    for measure, (column, raw, baseline) in LAYER_CURVES.items():
        # the CI bounds the raw measure; the adjusted one is raw minus a per-layer constant
        low = layers[f"{raw}_ci_low"] - layers[baseline] if raw else nan
        high = layers[f"{raw}_ci_high"] - layers[baseline] if raw else nan
        curves.append(_curve(key, measure, layers["layer"], layers[column], low, high, n_layers))
    if inputs.senses_on:
        for measure, (name, preprocessing) in (("senses_auroc", SENSES_AUROC), ("senses_auroc_shape", SENSES_SHAPE)):
            rows = [layer_series(inputs.senses[key], name, preprocessing, c) for c in ("value", "ci_low", "ci_high")]
            curves.append(_curve(key, measure, rows[0].index, *rows, n_layers))
    if key in inputs.within:
        within = _variant_rows(inputs.within[key], inputs.variant)
        last = within[within["layer_b"] == n_layers - 1].sort_values("layer_a")
        none = np.full(len(last), np.nan)
        curves.append(_curve(key, "cka_last_layer", last["layer_a"], last["cka_debiased"], none, none, n_layers))
    return curves


def atlas_curves(models: Sequence[Mapping], inputs: AtlasInputs) -> pd.DataFrame:
    """Long format, one row per (model, measure, layer) with a value: the curves of the atlas figure, by measure
    (``CURVE_MEASURES``), then model, then layer."""
    curves = [curve for model in models for curve in _model_curves(model["key"], inputs)]
    frame = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=list(CURVE_COLUMNS))
    order = {measure: i for i, measure in enumerate(CURVE_MEASURES)}
    frame = frame.sort_values("measure", key=lambda m: m.map(order), kind="stable")
    return frame.reset_index(drop=True)[list(CURVE_COLUMNS)]


# --------------------------------------------------------------------------------------------------
# Writers

INTEGER_COLUMNS = ("n_layers", "dim", "rows", "words_lost")


def _cell(column: str, value) -> str:
    """A value for people: whole numbers as such, depths to 2 decimals, other numbers to 3; text as written."""
    if isinstance(value, str):
        return md_text(value)
    if column in INTEGER_COLUMNS and pd.notna(value):
        return str(int(value))
    return fmt(value, 2 if column.endswith("_depth") else 3)


def caption(variant: str | None, senses_on: bool) -> str:
    """What the atlas table shows, in a few sentences of Markdown."""
    similarity = (
        f"CKA is debiased (near 0 for unrelated layers, can be slightly negative), on the similarity tables' "
        f"`{variant}` variant."
        if variant
        else "No similarity tables: the CKA and k-NN rows are empty."
    )
    senses = "" if senses_on else " Word senses: senses off (the senses rows are empty)."
    return (
        "Every model of the run on relative depth, ℓ / (L − 1): 0 is the input layer, 1 the last; a value at a "
        "relative depth is the nearest layer's. Adjusted measures are the raw measure minus the exact anisotropy "
        "baseline (every row, no sampling). Models trained `random` are untrained controls of the same "
        f"architecture. {similarity} A decoder has read only the left context of a word, an encoder both sides: "
        f"low similarity across the two families is partly that.{senses}"
    )


def atlas_markdown(rows: pd.DataFrame, variant: str | None, senses_on: bool) -> str:
    """The atlas for people: one column per model, one row per column of atlas.csv with what it means (six models'
    forty columns read down a page, not across it)."""
    docs = column_docs(variant)
    header = ["column", *(md_text(label) for label in rows["label"]), "meaning"]
    body = [
        [f"`{column}`", *(_cell(column, value) for value in rows[column]), docs[column]]
        for column in ATLAS_COLUMNS
        if column != "label"
    ]
    table = pipe_table(header, body, "l" + "r" * len(rows) + "l")
    return f"# Atlas: every model on relative depth\n\n{caption(variant, senses_on)}\n\n{table}\n"


def write_atlas_tables(
    rows: pd.DataFrame,
    curves: pd.DataFrame,
    paths: Mapping[str, str | os.PathLike],
    *,
    variant: str | None,
    senses_on: bool,
) -> None:
    """``atlas.csv``, ``atlas.md``, ``atlas.html`` (a page for the report) and ``atlas_curves.csv`` (``paths``: keys
    csv, md, html, curves), each written under a temporary name then renamed."""
    for key, frame in (("csv", rows), ("curves", curves)):
        with atomic_path(paths[key]) as tmp:
            frame.to_csv(tmp, index=False, lineterminator="\n")
    text = atlas_markdown(rows, variant, senses_on)
    write_text(paths["md"], text)
    write_text(paths["html"], page("Atlas: every model on relative depth", markdown_html(text)))
