"""The findings are written from a run's tables (report/findings.py): every number in the text is the tables', the
words for a trend follow the numbers, a sentence for a newer sense measure appears only where its rows are there,
and --check finds a stale block. One test runs the command on the smoke run."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pandas as pd
import pytest

from contextuality.report.findings import PAPER, README, SENSES, main, readme_block
from contextuality.report.findings_paper import paper_block
from contextuality.report.findings_run import Model, RunTables, markers
from contextuality.report.findings_senses import senses_block
from contextuality.report.tables import fmt_in_layers, fmt_layers, fmt_share_span, fmt_signed, fmt_span
from contextuality.senses.rows import Rows

LAYERS = 5


def _layers(key: str, cosine, selfsim, massive: bool) -> pd.DataFrame:
    n = len(cosine)
    return pd.DataFrame(
        {
            "model": key,
            "layer": range(n),
            "baseline_cosine": cosine,
            "baseline_cosine_exact": np.asarray(cosine) + 0.01,
            "after_final_norm": [0] * (n - 1) + [1],
            "adjusted_self_similarity": selfsim,
            "adjusted_intra_sentence": np.linspace(0.3, 0.1, n),
            "mev": [np.nan] + [0.02] * (n - 2) + [0.21],
            "baseline_mev": [0.9] * n,
            "adjusted_mev": [np.nan] + [-0.5] * (n - 1),
            "rogue_top1_share": [0.1] + [0.5] * (n - 1),
            "rogue_top3_share": [0.2] + [0.9, 0.92, 0.96, 0.94][: n - 1],
            "rogue_dims": ["507,247,308,1"] * n,
            "massive_dims": [np.nan, np.nan] + (["247,507"] * (n - 2) if massive else [np.nan] * (n - 2)),
            "massive_occurrences": [0, 0] + [19000] * (n - 2),
            "massive_first_position_share": [np.nan, np.nan] + [0.995] * (n - 2),
            "norm_mean": [150.0, 160.0] + [1700.0] * (n - 2),
            "effective_rank": [455.0, 300.0] + [7.0, 53.0, 20.0][: n - 2],
            "isoscore": [0.5, 0.2] + [0.0] * (n - 2),
            "null_gaussian_isoscore": [0.9] * n,
        }
    )


def _senses(key: str, decoder: bool, extra: bool) -> pd.DataFrame:
    rows = Rows(key, 0)
    for layer in range(LAYERS):
        rows.layer = layer
        add = lambda measure, value, **kw: rows.add("x", measure, "centred", value, **kw)  # noqa: E731
        add("mean_self_similarity", [0.96, 0.9, 0.77, 0.8, 0.85][layer], n=100)
        add("auroc_same_sense", [0.544, 0.6, 0.631, 0.62, 0.61][layer], ci=(0.5, 0.7), n=1000)
        for name, value in (("auroc_stratified", 0.615), ("auroc_shape", 0.604), ("auroc_cosine_shape", 0.644)):
            add(name, value, ci=(value - 0.03, value + 0.03), n=1000)
        add("heldout_balanced_accuracy", 0.588, ci=(0.565, 0.61), n=1000)
        add("auroc_macro", 0.666, n=100)
        add("auroc_same_sense_coarse", 0.64, ci=(0.58, 0.69), n=100)
        add("auroc_same_token", 0.5, n=900, note="pairs of the same stored token sequence only: 190 of 12,437 differ")
        if layer:
            add("auroc_minus_layer0", 0.087, ci=(0.06, 0.109), p=1 / 201, n=1000, note="(floor 0.005)")
        add("knn_accuracy", 0.21, null=0.145, ci=(0.192, 0.229), n=900)
        add("knn_chance", 0.126, n=900)
        add("knn_ceiling", 0.429, n=900)
        add(
            "delta_within_between",
            0.04,
            p=1 / 1001,
            n=100,
            note="p against 1000 label permutations within word forms (floor 0.001)",
        )
        add("delta_cluster_index", [-0.001, 0.01, 0.034, 0.02, 0.0][layer], ci=(-0.05, 0.05), p=0.5, n=200)
        add("delta_cluster_index_pseudo", -0.36 - 0.04 * layer, ci=(-0.6, -0.3), p=3e-11, n=200)
        add("share_gaussian_null_rejected", 0.04 + 0.04 * layer, n=200)
        add("share_gaussian_null_rejected_mono", 0.04 + 0.035 * layer, n=200)
        for suffix, beta in (("content", -0.14), ("frequency", -0.02)):
            add(f"beta_log_synsets_{suffix}", beta, ci=(beta - 0.03, beta + 0.03), n=1601)
        if decoder:
            add("prediction_alignment_median_rank", 11, null=16934, n=500)
            add("prediction_alignment_share_rank_lt_10", 0.48, null=0.0, n=500)
            add("alignment_median_rank", 158 if layer == LAYERS - 1 else 3460, null=22236, n=500)
        if extra:
            add("auroc_gain_over_shape", 0.054, ci=(0.015, 0.089), n=1000)
            add("w3b_detectable_split_share", 0.52 if layer == 2 else float("nan"), n=200)
            if decoder:
                add("prediction_vs_alignment_rank_median_difference", -168.0, p=9.6e-41, n=500)
    return rows.frame()


def _claims(keys, statuses) -> pd.DataFrame:
    rows = [
        {"model": key, "label": key.upper(), "paper_model": "", "claim": claim, "status": status}
        for key in keys
        for claim, status in statuses.items()
    ]
    return pd.DataFrame(rows)


def synthetic_run(extra: bool = False) -> RunTables:
    statuses = {"S3": "HOLDS", "S5": "HOLDS", "W1": "HOLDS", "W3a": "HOLDS", "W3b": "FAILS", "W4": "FAILS"}
    models = [
        Model("enc", "ENC", "bert", _layers("enc", [0.06, 0.15, 0.21, 0.2, 0.02], [0.9, 0.8, 0.7, 0.64, 0.7], False)),
        Model("dec", "DEC", "gpt2", _layers("dec", [0.08, 0.57, 0.7, 0.53, 0.46], [0.88, 0.6, 0.3, 0.18, 0.4], True)),
    ]
    for m in models:
        m.senses = _senses(m.key, m.key == "dec", extra)
        m.postprocess = pd.concat(
            [
                m.layers.assign(postprocess="abtt", baseline_cosine=0.005, adjusted_self_similarity=0.9),
                m.layers.assign(postprocess="standardize", baseline_cosine=0.1),
            ]
        )
    return RunTables(_claims(["enc", "dec"], statuses), models)


def test_the_numbers_are_formatted_one_way():
    assert fmt_span(0.53, 0.7) == "0.53–0.70" and fmt_span(-0.01, 0.11) == "-0.01 to 0.11" and fmt_span(1, 1) == "1.00"
    assert fmt_layers([1, 2, 3, 4, 6, 9, 10]) == "1-4, 6, 9-10" and fmt_in_layers([5]) == "layer 5"
    assert fmt_share_span(0.04, 0.2) == "4-20%" and fmt_signed(-0.14) == "-0.14"


def test_the_paper_block_reads_the_layers_and_chooses_its_words_from_them():
    text = paper_block(synthetic_run())
    assert "DEC: from 0.08 (layer 0) to 0.70 at layer 2, 0.53–0.70 in layers 1-3, and falls to 0.46" in text
    assert "(the hidden state after the final norm)" in text
    assert "to within 0.01 in every layer" in text  # exact minus sampled
    assert "to 0.64 at layer 3 (ENC) and 0.18 at layer 3 (DEC)" in text
    assert "The last layer of ENC and DEC is again less context-specific" in text
    assert "the top three dimensions (507, 247, 308 at layer 3) carry 90-96%" in text
    assert "in DEC's layers 2-4, dimension(s) 247, 507 hold massive activations on up to 19,000 rows" in text
    assert "No massive activation in ENC" in text
    assert (
        "After all-but-the-top (the mean and the top d/100 principal components removed) the anisotropy is 0.01" in text
    )


def test_the_senses_block_says_not_detected_and_names_the_lowest_layer():
    text = senses_block(synthetic_run())
    assert (
        "falls from 0.96 (ENC) and 0.96 (DEC) at the input layer to 0.77 at layer 2 (ENC) and 0.77 at layer 2 (DEC), its lowest"
        in text
    )
    assert "AUROC ENC: 0.631 [0.500, 0.700] at layer 2 (layer 0: 0.544, a gain of +0.087 [0.060, 0.109]" in text
    assert "p ≤ 0.005" in text and "1,000 permutations" in text
    assert "not detected, by a test that can detect word-sized splits" in text
    assert "the senses form no clusters" not in text and "every pseudo-word" not in text
    assert "as groups (the difference of their mean cluster index, Mann-Whitney)" in text
    assert "B5 ranks the token's own row at median 11 (a frequency-matched token's row: 16,934)" in text
    assert "the version the verdict reads: ENC: below 0 in 4 of 4 layers" in text
    assert "on all word forms (WordNet's morphy; stopwords and numerals in): ENC: below 0 in 0 of 4 layers" in text


def test_a_newer_measure_has_its_sentence_only_where_its_rows_are():
    assert "gain over shape" not in senses_block(synthetic_run())
    assert (
        "The model's gain over shape (cosine + shape against shape alone, paired over lemma resamples): +0.054 [0.015, 0.089] (ENC)"
        in senses_block(synthetic_run(extra=True))
    )


def test_w3c_says_the_paired_ranks_where_the_run_has_them_and_w3b_its_power():
    """B4 and B5 on the same tokens: the paired difference is said, "not compared" only for an unpaired run."""
    unpaired, paired = senses_block(synthetic_run()), senses_block(synthetic_run(extra=True))
    assert "so their ranks are not compared" in unpaired and "so their ranks are not compared" not in paired
    assert "On the same tokens, B5's rank minus B4's at the last layer: median -168 (Wilcoxon p 9.6e-41)" in paired
    assert "the test would see splits only if at least 52%" in paired and "would see splits" not in unpaired


def test_the_readme_block_credits_all_but_the_top():
    text = readme_block(synthetic_run())
    assert "ENC stands in for BERT and DEC stands in for GPT-2" in text
    assert "after all-but-the-top (the mean and the top d/100 principal components removed) it is 0.01" in text
    assert "sense clusters without labels are not detected (W3b)" in text


def test_anisotropy_says_more_only_where_every_contextual_layer_is_above_the_input():
    # ENC's last layer (0.02) is below its input layer (0.06), though its mean over layers 1-4 is above it
    text = readme_block(synthetic_run())
    assert "contextual layers are not all more anisotropic than the input layer" in text
    assert "goes from 0.06 at layer 0 to 0.02–0.21 in layers 1-4, above layer 0 in 3 of them;" in text
    assert "0.46–0.70 in layers 1-4)" in text  # DEC: every layer above its input, no count
    run = synthetic_run()
    run.models[0].layers.loc[4, "baseline_cosine"] = 0.1
    assert "contextual layers are more anisotropic than the input layer" in readme_block(run)


def _targets(tmp_path):
    findings, readme = tmp_path / "findings.md", tmp_path / "README.md"
    text = "".join(f"# {n}\n{markers(n)[0]}\nold\n{markers(n)[1]}\nafter\n" for n in (PAPER, SENSES))
    findings.write_text(text)
    readme.write_text(f"# r\n{markers(README)[0]}\nold\n{markers(README)[1]}\nafter\n")
    return findings, readme


def _filled(text: str, name: str) -> str:
    begin, end = markers(name)
    return text.split(begin)[1].split(end)[0]


def assert_no_placeholder(block: str) -> None:
    prose = re.sub(r"`[^`]*`", "", block)  # code spans are literal paths such as results/{model}/
    assert block.strip() and "old" not in block.split()
    assert not re.search(r"[{}]|\bnan\b|\bNone\b|\bNaN\b", prose), prose


@pytest.fixture()
def smoke_results(smoke_run):
    return smoke_run / "results"


@pytest.mark.slow
def test_the_command_fills_every_block_of_the_smoke_run_and_check_then_passes(smoke_results, tmp_path, capsys):
    findings, readme = _targets(tmp_path)
    args = [str(smoke_results), "--findings", str(findings), "--readme", str(readme)]
    assert main([*args, "--check"]) == 1 and "stale" in capsys.readouterr().err
    assert main(args) == 0
    for path, names in ((findings, (PAPER, SENSES)), (readme, (README,))):
        for name in names:
            assert_no_placeholder(_filled(path.read_text(), name))
        assert path.read_text().endswith("after\n")
    assert main([*args, "--check"]) == 0
    shutil.copy(readme, tmp_path / "twice.md")
    assert main(args) == 0 and readme.read_text() == (tmp_path / "twice.md").read_text()


def test_a_missing_marker_or_run_is_one_line(tmp_path, capsys):
    findings, _ = _targets(tmp_path)
    assert main([str(tmp_path / "nowhere"), "--findings", str(findings)]) == 2
    assert "claims.csv: not there" in capsys.readouterr().err
