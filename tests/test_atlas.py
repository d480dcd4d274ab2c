"""The atlas (report.atlas, atlas_inputs, atlas_figures; workflow/scripts/atlas.py): one row per model on relative
depth, its curves and figures, from hand-made per-model tables and synthetic similarity tables (seconds), and from
the smoke run's real tables (slow)."""

from __future__ import annotations

import json
import math
import runpy
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contextuality.report.atlas import ATLAS_COLUMNS, CURVE_COLUMNS, CURVE_MEASURES, atlas_curves, atlas_rows
from contextuality.report.atlas_figures import paths_by_format
from contextuality.report.atlas_inputs import AtlasInputError, read_inputs
from contextuality.report.figure_files import FORMATS

PROJECT = Path(__file__).resolve().parents[1]
SCRIPT = PROJECT / "workflow" / "scripts" / "atlas.py"
SIMILARITY_COLUMNS = (
    "corpus, model_a, layer_a, depth_a, model_b, layer_b, depth_b, variant, n, cka_biased, cka_debiased, "
    "procrustes_angle, procrustes_distance, mutual_knn, knn_n, knn_k, knn_chance, null_biased_mean, null_biased_sd, "
    "null_debiased_mean, null_debiased_sd, p_perm, best_for_a, best_for_b, note"
).split(", ")
# (key, layers, model_type, training): an encoder, an instruction-tuned decoder of 31 layers, a random control
MODELS = (("enc", 7, "bert", "sentence-encoder"), ("dec", 31, "gpt2", "instruct"), ("rnd", 7, "bert", "random"))
SENSE_CLAIMS = ("W1", "W2", "W3a", "W3b", "W3c", "W4")


# --------------------------------------------------------------------------------------------------
# Hand-made inputs


def layers_table(key: str, n_layers: int) -> pd.DataFrame:
    """A layers.csv: each layer's anisotropy says its own index (0.01 ℓ + 0.2), so a pick by depth is checkable."""
    layer = np.arange(n_layers)
    depth = layer / (n_layers - 1)
    baseline = 0.2 + 0.01 * layer
    self_similarity = 0.9 - 0.4 * depth
    intra = 0.5 + 0.1 * depth
    mev = np.where(layer == 0, np.nan, 0.05 + 0.02 * depth)
    return pd.DataFrame(
        {
            "model": key,
            "layer": layer,
            "baseline_cosine_exact": baseline,
            "self_similarity": self_similarity,
            "self_similarity_ci_low": self_similarity - 0.02,
            "self_similarity_ci_high": self_similarity + 0.02,
            "intra_sentence": intra,
            "intra_sentence_ci_low": intra - 0.03,
            "intra_sentence_ci_high": intra + 0.03,
            "adjusted_self_similarity_exact": self_similarity - baseline,
            "adjusted_intra_sentence_exact": intra - baseline,
            "mev": mev,
            "mev_ci_low": mev - 0.01,
            "mev_ci_high": mev + 0.01,
            "baseline_mev_exact": 0.01,
            "adjusted_mev_exact": mev - 0.01,
        }
    )


def rogue_table(key: str, n_layers: int) -> pd.DataFrame:
    rows = [
        {"model": key, "layer": layer, "dimension": rank, "rank": rank, "contribution": c, "share": c / 0.3}
        for layer in range(n_layers)
        for rank, c in enumerate([0.1 + 0.001 * layer, 0.08, 0.05, 0.04, 0.03], start=1)
    ]
    return pd.DataFrame(rows)


def senses_table(key: str, n_layers: int) -> pd.DataFrame:
    """AUROC rows (and one other measure, out of [0, 1] as betas are): the best layer at depth 2/3."""
    rows = []
    for layer in range(n_layers):
        auroc = 0.6 - 0.2 * abs(layer / (n_layers - 1) - 2 / 3)
        for measure, value in (("auroc_same_sense", auroc), ("auroc_shape", 0.55), ("beta_log_n", -3.0)):
            rows.append(
                {
                    "model": key,
                    "layer": layer,
                    "family": "separation",
                    "measure": measure,
                    "preprocessing": "centred",
                    "value": value,
                    "null": 0.5,
                    "ci_low": value - 0.05,
                    "ci_high": value + 0.05,
                    "p": 0.01,
                    "n": 100,
                    "note": "",
                }
            )
    return pd.DataFrame(rows)


def cka(key_a: str, layer_a: int, depth_a: float, key_b: str, layer_b: int, depth_b: float) -> float:
    """Planted debiased CKA: 1 on a model's diagonal, falling with the depth gap; across models scaled by a
    per-pair level, highest for (enc, rnd) at their layers 2 and 3."""
    if key_a == key_b:
        return 1.0 if layer_a == layer_b else 0.9 * math.exp(-2 * abs(depth_a - depth_b))
    level = {("dec", "enc"): 0.4, ("dec", "rnd"): 0.2, ("enc", "rnd"): 0.6}.get((key_a, key_b), 0.5)
    bump = 0.3 if (key_a, key_b, layer_a, layer_b) == ("enc", "rnd", 2, 3) else 0.0
    return level * math.exp(-abs(depth_a - depth_b)) + bump


def similarity_table(key_a: str, layers_a: int, key_b: str, layers_b: int, variants=("raw", "unit_rows")):
    """A similarity table (the similarity rules' columns) of planted values; within a model (A = B) the pairs ℓ <= m only."""
    rows = []
    for variant in variants:
        shift = -0.05 if variant == "raw" else 0.0  # the variant read is visible in the values
        for la in range(layers_a):
            for lb in range(layers_b):
                if key_a == key_b and lb < la:
                    continue
                da, db = la / (layers_a - 1), lb / (layers_b - 1)
                value = cka(key_a, la, da, key_b, lb, db)
                value = value if key_a == key_b and la == lb else value + shift
                rows.append(
                    [
                        "sts", key_a, la, da, key_b, lb, db, variant, 2000, min(1.0, value + 0.05), value,
                        0.3, 0.4, value / 2, 1000, 10, 10 / 999, 0.05, 0.01, 0.0, 0.01, 0.05, 0, 0, "",
                    ]
                )  # fmt: skip
    return pd.DataFrame(rows, columns=SIMILARITY_COLUMNS)


def claims_table() -> pd.DataFrame:
    rows = [{"model": "enc", "claim": "A1b", "status": "HOLDS"}]
    for key, *_ in MODELS:
        verdicts = dict(zip(SENSE_CLAIMS, ("HOLDS", "FAILS", "HOLDS", "N/A", "N/A", "FAILS")))
        rows += [{"model": key, "claim": claim, "status": verdicts[claim]} for claim in SENSE_CLAIMS]
    return pd.DataFrame(rows).assign(label="", statement="", evidence="")


def write_inputs(folder: Path, senses: bool = True, models=MODELS) -> dict:
    """Every input file of the atlas rule under ``folder``; returns the rule's named input lists."""
    files = {name: [] for name in ("layers", "rogue", "losses", "records", "senses", "within", "pairs")}
    for key, n_layers, model_type, _ in models:
        model = folder / key
        model.mkdir(parents=True)
        tables = {"layers": layers_table(key, n_layers), "rogue": rogue_table(key, n_layers)}
        tables["within"] = similarity_table(key, n_layers, key, n_layers)
        if senses:
            tables["senses"] = senses_table(key, n_layers)
        for name, table in tables.items():
            table.to_csv(model / f"{name}.csv", index=False)
            files[name].append(str(model / f"{name}.csv"))
        losses = {"model": key, "units": 1000 * n_layers, "words_lost": {"truncated": 3, "skipped": 0, "spanning": 1}}
        record = {"key": key, "source": "random", "n_layers": n_layers, "dim": 32, "model_type": model_type,
                  "lm_kind": {"gpt2": "causal", "llama": "causal"}.get(model_type, "masked"),
                  "n_parameters": 110_000 * n_layers}  # fmt: skip
        for name, value in (("losses", losses), ("records", record)):
            (model / f"{name}.json").write_text(json.dumps(value))
            files[name].append(str(model / f"{name}.json"))
    depth = {key: n for key, n, *_ in models}
    for a, b in pairs_of(models):
        path = folder / f"{a}__{b}.csv"
        similarity_table(a, depth[a], b, depth[b]).to_csv(path, index=False)
        files["pairs"].append(str(path))
    claims_table().to_csv(folder / "claims.csv", index=False)
    files["claims"] = str(folder / "claims.csv")  # one named file: Snakemake gives a string
    return files


def pairs_of(models=MODELS) -> list[list[str]]:
    keys = sorted(key for key, *_ in models)
    return [[a, b] for i, a in enumerate(keys) for b in keys[i + 1 :]]


def params_models(models=MODELS) -> list[dict]:
    return [{"key": key, "label": f"model {key}", "training": training, "stands_for": None}
            for key, _, _, training in models]  # fmt: skip


@pytest.fixture
def run(tmp_path):
    files = write_inputs(tmp_path / "in")
    return params_models(), pairs_of(), files, read_inputs(params_models(), pairs_of(), files)


# --------------------------------------------------------------------------------------------------
# The table


def test_one_row_per_model_with_the_specs_columns_in_order_and_no_empty_measure(run):
    models, _, _, inputs = run
    rows = atlas_rows(models, inputs)
    assert list(rows.columns) == list(ATLAS_COLUMNS)
    assert list(rows["model"]) == ["enc", "dec", "rnd"] and list(rows["label"]) == [
        "model enc",
        "model dec",
        "model rnd",
    ]
    assert ATLAS_COLUMNS[:9] == (
        "model",
        "label",
        "kind",
        "training",
        "n_layers",
        "dim",
        "params_m",
        "rows",
        "words_lost",
    )
    assert [c for c in ATLAS_COLUMNS if c.startswith("senses_W")] == [f"senses_{c}" for c in SENSE_CLAIMS]
    assert ATLAS_COLUMNS[-5:] == (
        "cka_adjacent_mean",
        "cka_first_last",
        "closest_model",
        "closest_cka",
        "mutual_knn_best",
    )
    assert rows.notna().all().all(), rows.columns[rows.isna().any()].tolist()
    assert list(rows["kind"]) == ["encoder", "decoder", "encoder"]
    assert list(rows["params_m"]) == pytest.approx([0.77, 3.41, 0.77])
    assert list(rows["words_lost"]) == [4, 4, 4] and list(rows["rows"]) == [7000, 31000, 7000]
    assert list(rows["senses_W4"]) == ["FAILS"] * 3 and list(rows["senses_W3b"]) == ["N/A"] * 3


def test_relative_depth_picks_the_nearest_layer(run):
    """A 7-layer and a 31-layer model: depth .5 is layers 3 and 15; .25 is 1.5 and 7.5, rounded half up."""
    models, _, _, inputs = run
    rows = atlas_rows(models, inputs).set_index("model")
    for key, layers in (("enc", (0, 2, 3, 5, 6)), ("dec", (0, 8, 15, 23, 30))):
        picked = rows.loc[
            key, ["anisotropy_d0", "anisotropy_d25", "anisotropy_d50", "anisotropy_d75", "anisotropy_d100"]
        ]
        assert list(picked) == pytest.approx([0.2 + 0.01 * layer for layer in layers])
    assert rows.loc["dec", "anisotropy_max"] == pytest.approx(0.5) and rows.loc["dec", "anisotropy_max_depth"] == 1.0
    # the senses' best layer is at depth 2/3: layer 4 of 7, layer 20 of 31
    assert rows.loc["enc", "senses_auroc_best_depth"] == pytest.approx(4 / 6)
    assert rows.loc["dec", "senses_auroc_best_depth"] == pytest.approx(20 / 30)
    assert rows.loc["enc", "senses_auroc_shape"] == pytest.approx(0.55)
    assert rows.loc["enc", "self_similarity_adj_top"] == pytest.approx(0.5 - 0.26)
    assert rows.loc["enc", "mev_max"] == pytest.approx(0.06) and rows.loc["enc", "mev_max_depth"] == 1.0
    assert rows.loc["enc", "rogue_top3_share_max"] == pytest.approx((0.106 + 0.08 + 0.05) / 0.3)


def test_closest_model_is_the_grid_maximum_over_pairs(run):
    models, _, _, inputs = run
    rows = atlas_rows(models, inputs).set_index("model")
    assert inputs.variant == "unit_rows"
    # enc and rnd: 0.6 + the planted 0.3 at their layers 2 and 3; dec's best partner is enc (0.4 at equal depths)
    assert rows.loc["enc", "closest_model"] == "rnd" and rows.loc["enc", "closest_cka"] == pytest.approx(
        0.6 * math.exp(-abs(2 / 6 - 3 / 6)) + 0.3
    )
    assert (
        rows.loc["rnd", "closest_model"] == "enc" and rows.loc["rnd", "closest_cka"] == rows.loc["enc", "closest_cka"]
    )
    assert rows.loc["dec", "closest_model"] == "enc" and rows.loc["dec", "closest_cka"] == pytest.approx(0.4)
    assert rows.loc["enc", "mutual_knn_best"] == pytest.approx(rows.loc["enc", "closest_cka"] / 2)
    assert rows.loc["enc", "cka_first_last"] == pytest.approx(0.9 * math.exp(-2))
    assert rows.loc["enc", "cka_adjacent_mean"] == pytest.approx(0.9 * math.exp(-2 / 6))


def test_raw_similarity_is_read_when_a_table_lacks_unit_rows(tmp_path):
    files = write_inputs(tmp_path)
    raw_only = similarity_table("dec", 31, "enc", 7, variants=("raw",))
    raw_only.to_csv(files["pairs"][0], index=False)
    inputs = read_inputs(params_models(), pairs_of(), files)
    rows = atlas_rows(params_models(), inputs).set_index("model")
    assert inputs.variant == "raw"
    assert rows.loc["dec", "closest_cka"] == pytest.approx(0.4 - 0.05)


@pytest.mark.parametrize(
    ("name", "index", "column", "value"),
    [
        ("layers", 1, "baseline_cosine_exact", 1.2),
        ("layers", 0, "mev", -0.3),
        ("senses", 2, "value", 1.5),
        ("pairs", 1, "cka_debiased", -1.4),
        ("within", 0, "mutual_knn", 2.0),
        ("rogue", 0, "contribution", "many"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_the_file_and_column(tmp_path, name, index, column, value):
    files = write_inputs(tmp_path)
    path = files[name][index]
    table = pd.read_csv(path)
    table[column] = table[column].astype(object)
    rows = table.index[table["measure"] == "auroc_same_sense"] if name == "senses" else table.index  # betas: no bound
    table.loc[rows[-1], column] = value
    table.to_csv(path, index=False)
    with pytest.raises(AtlasInputError) as refused:
        read_inputs(params_models(), pairs_of(), files)
    assert path in str(refused.value) and repr(column) in str(refused.value)


def test_slightly_negative_debiased_cka_and_nan_are_accepted(tmp_path):
    files = write_inputs(tmp_path)
    table = pd.read_csv(files["pairs"][0])
    table.loc[0, "cka_debiased"], table.loc[1, "cka_debiased"] = -0.002, np.nan
    table.to_csv(files["pairs"][0], index=False)
    read_inputs(params_models(), pairs_of(), files)


def test_inputs_of_another_model_or_without_the_new_record_keys_are_refused(tmp_path):
    files = write_inputs(tmp_path)
    files["layers"][0], files["layers"][1] = files["layers"][1], files["layers"][0]
    with pytest.raises(AtlasInputError, match=r"dec/layers.csv: column 'model' names \['dec'\], not the model 'enc'"):
        read_inputs(params_models(), pairs_of(), files)
    files = write_inputs(tmp_path / "again")
    record = json.loads(Path(files["records"][1]).read_text())
    Path(files["records"][1]).write_text(json.dumps({k: v for k, v in record.items() if k != "n_parameters"}))
    with pytest.raises(AtlasInputError, match=r"dec/records.json: no 'n_parameters'"):
        read_inputs(params_models(), pairs_of(), files)
    with pytest.raises(AtlasInputError, match=r"input 'pairs'"):
        read_inputs(params_models(), pairs_of()[:2], files)


def test_a_similarity_table_of_another_depth_is_refused(tmp_path):
    files = write_inputs(tmp_path)
    similarity_table("dec", 31, "enc", 13).to_csv(files["pairs"][0], index=False)  # enc has 7 layers
    with pytest.raises(AtlasInputError, match=r"dec__enc.csv: column 'layer_b' holds layers 0..12"):
        read_inputs(params_models(), pairs_of(), files)
    similarity_table("enc", 7, "enc", 7).assign(depth_a=lambda t: t["layer_a"] / 7).to_csv(files["within"][0])
    with pytest.raises(AtlasInputError, match=r"enc/within.csv: column 'depth_a' holds"):
        read_inputs(params_models(), pairs_of()[:0], {**files, "pairs": []})


def test_rogue_shares_missing_or_undefined_leave_that_column_empty(tmp_path):
    """No geometry panel: no rows in rogue_dimensions.csv; shares undefined (anisotropy within its noise): NaN."""
    files = write_inputs(tmp_path)
    pd.read_csv(files["rogue"][0]).iloc[:0].to_csv(files["rogue"][0], index=False)
    pd.read_csv(files["rogue"][1]).assign(share=np.nan).to_csv(files["rogue"][1], index=False)
    rows = atlas_rows(params_models(), read_inputs(params_models(), pairs_of(), files))
    assert rows["rogue_top3_share_max"].isna().tolist() == [True, True, False]


def test_senses_off_gives_empty_senses_columns_and_a_table_still_written(tmp_path):
    files = write_inputs(tmp_path / "in", senses=False)
    out = run_script(tmp_path / "out", files)
    rows = pd.read_csv(out["csv"], keep_default_na=False, na_values=[""])
    senses = [c for c in ATLAS_COLUMNS if c.startswith("senses_")]
    assert rows[senses].isna().all().all() and rows.drop(columns=senses).notna().all().all()
    assert "senses off" in Path(out["md"]).read_text() and "senses off" in Path(out["html"]).read_text()
    curves = pd.read_csv(out["curves"])
    assert not curves["measure"].str.startswith("senses").any()


# --------------------------------------------------------------------------------------------------
# The curves, the writers and the figures


def test_curves_are_long_with_six_measures_and_the_shape_baseline(run):
    models, _, _, inputs = run
    curves = atlas_curves(models, inputs)
    assert list(curves.columns) == list(CURVE_COLUMNS)
    assert list(dict.fromkeys(curves["measure"])) == list(CURVE_MEASURES)
    dec = curves[(curves["model"] == "dec") & (curves["measure"] == "cka_last_layer")]
    assert list(dec["layer"]) == list(range(31)) and dec["value"].iloc[-1] == 1.0
    assert dec["relative_depth"].iloc[15] == 0.5
    mev = curves[(curves["model"] == "enc") & (curves["measure"] == "mev_adj")]
    assert list(mev["layer"]) == list(range(1, 7))  # MEV is NaN at layer 0: no row
    # the adjusted measure's interval is the raw interval shifted by the baseline
    self_adj = curves[(curves["model"] == "enc") & (curves["measure"] == "self_similarity_adj")]
    assert (self_adj["ci_high"] - self_adj["value"]).to_numpy() == pytest.approx(0.02)


def run_script(out: Path, files: dict, models=MODELS) -> dict:
    """workflow/scripts/atlas.py as the atlas rule runs it (its inputs, params and outputs)."""
    output = {name: str(out / f"{stem}") for name, stem in
              (("csv", "atlas.csv"), ("md", "atlas.md"), ("html", "atlas.html"), ("curves", "atlas_curves.csv"))}  # fmt: skip
    output["figure"] = [str(out / f"atlas.{ext}") for ext in reversed(FORMATS)]
    output["cka_figure"] = [str(out / f"atlas_cka.{ext}") for ext in FORMATS]
    snakemake = types.SimpleNamespace(
        input=types.SimpleNamespace(**files),
        output=types.SimpleNamespace(**output),
        params=types.SimpleNamespace(models=params_models(models), pairs=pairs_of(models)),
        log=[],
    )
    runpy.run_path(str(SCRIPT), init_globals={"snakemake": snakemake})
    return output


def test_the_script_writes_every_output_and_the_same_inputs_give_the_same_bytes(tmp_path):
    files = write_inputs(tmp_path / "in")
    first, second = run_script(tmp_path / "1", files), run_script(tmp_path / "2", files)
    for name in ("csv", "md", "html", "curves", "figure", "cka_figure"):
        paths = first[name] if isinstance(first[name], list) else [first[name]]
        again = second[name] if isinstance(second[name], list) else [second[name]]
        for path, other in zip(paths, again):
            assert Path(path).stat().st_size > 0
            assert Path(path).read_bytes() == Path(other).read_bytes(), path
    assert set(paths_by_format(first["figure"])) == set(FORMATS) == set(paths_by_format(first["cka_figure"]))
    assert not [p.name for p in (tmp_path / "1").iterdir() if ".tmp-" in p.name]
    rows = pd.read_csv(first["csv"])
    assert list(rows.columns) == list(ATLAS_COLUMNS)
    html = Path(first["html"]).read_text()
    assert "<table>" in html and "<script" not in html and "unit_rows" in html and "left context" in html
    assert '<span class="verdict HOLDS">' in html and "model dec" in html


def test_a_hostile_label_stays_text(tmp_path):
    models = (("enc", 7, "bert", "pretrained"), ("dec", 31, "gpt2", "random"))
    files = write_inputs(tmp_path / "in", models=models)
    params = params_models(models)
    params[0]["label"] = "$\\frac{a</script><b>|x_"
    out = tmp_path / "out"
    output = {name: str(out / stem) for name, stem in (("csv", "a.csv"), ("md", "a.md"), ("html", "a.html"), ("curves", "c.csv"))}  # fmt: skip
    output |= {"figure": [str(out / f"a.{e}") for e in FORMATS], "cka_figure": [str(out / f"b.{e}") for e in FORMATS]}
    snakemake = types.SimpleNamespace(
        input=types.SimpleNamespace(**files),
        output=types.SimpleNamespace(**output),
        params=types.SimpleNamespace(models=json.dumps(params), pairs=pairs_of(models)),
        log=[],
    )
    runpy.run_path(str(SCRIPT), init_globals={"snakemake": snakemake})
    html = Path(output["html"]).read_text()
    assert "<b>" not in html and "</script>" not in html and "&lt;/script" in html


def test_one_model_has_no_pairs_and_still_draws_both_figures(tmp_path):
    models = (("enc", 7, "bert", "pretrained"),)
    out = run_script(tmp_path / "out", write_inputs(tmp_path / "in", models=models), models=models)
    rows = pd.read_csv(out["csv"])
    assert rows["closest_model"].isna().all() and rows["cka_first_last"].notna().all()
    assert all(Path(path).stat().st_size > 0 for path in out["figure"] + out["cka_figure"])


# --------------------------------------------------------------------------------------------------
# The smoke run's real tables


@pytest.mark.slow
def test_the_atlas_of_the_smoke_runs_real_tables(smoke_run, tmp_path):
    """The smoke run's per-model tables as the atlas rule gives them (source.json completed with the two keys
    materialise_model adds where this run predates them), synthetic similarity tables of the models' shapes."""
    keys = ("tiny-bert", "tiny-gpt2")
    metrics, files = smoke_run / "results" / "metrics" / "sts", {}
    files["layers"] = [str(metrics / key / "layers.csv") for key in keys]
    files["rogue"] = [str(metrics / key / "rogue_dimensions.csv") for key in keys]
    files["senses"] = [str(metrics / key / "senses" / "layers.csv") for key in keys]
    files["losses"] = [str(smoke_run / "results" / "embeddings" / "sts" / key / "losses.json") for key in keys]
    files["claims"] = str(smoke_run / "results" / "tables" / "claims.csv")
    files["records"], depth = [], {}
    for key, model_type in zip(keys, ("bert", "gpt2")):
        record = json.loads((smoke_run / "resources" / "models" / key / "source.json").read_text())
        record.setdefault("model_type", model_type)
        record.setdefault("lm_kind", {"gpt2": "causal"}.get(model_type, "masked"))
        record.setdefault("n_parameters", 50_000)
        (tmp_path / f"{key}.json").write_text(json.dumps(record))
        files["records"].append(str(tmp_path / f"{key}.json"))
        depth[key] = record["n_layers"]
    files["within"] = []
    for key in keys:
        similarity_table(key, depth[key], key, depth[key]).to_csv(tmp_path / f"{key}_within.csv", index=False)
        files["within"].append(str(tmp_path / f"{key}_within.csv"))
    similarity_table(keys[0], depth[keys[0]], keys[1], depth[keys[1]]).to_csv(tmp_path / "pair.csv", index=False)
    files["pairs"] = [str(tmp_path / "pair.csv")]
    models = [(key, depth[key], model_type, "random") for key, model_type in zip(keys, ("bert", "gpt2"))]
    out = run_script(tmp_path / "out", files, models=models)
    rows = pd.read_csv(out["csv"], keep_default_na=False, na_values=[""])
    assert len(rows) == 2 and rows.notna().all().all(), rows.columns[rows.isna().any()].tolist()
    assert list(rows["kind"]) == ["encoder", "decoder"] and list(rows["closest_model"]) == list(reversed(keys))
    assert set(rows["senses_W1"]) <= {"HOLDS", "FAILS", "N/A"}
    assert all(Path(path).stat().st_size > 0 for path in out["figure"] + out["cka_figure"])
