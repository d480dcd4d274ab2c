"""The sense job's own pieces: which occurrences count, which stored row a usage has, the exact self-similarity by
form, each occurrence's own and next token, and the claims' verdicts on hand-made rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contextuality.report.senses import FAILS, HOLDS, NA, sense_claims
from contextuality.senses.job import sts_occurrences, usage_row_numbers
from contextuality.senses.output.layer import token_ids_of
from contextuality.senses.rows import Rows
from contextuality.senses.sts.measures import self_similarity_by_form, word_seed


def test_self_similarity_by_form_is_the_brute_force_mean_over_ordered_pairs():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 8))
    forms = np.array(list("aaaabbbbbbccccccccccddddddddddeeeeee")[:30])
    got = self_similarity_by_form(vectors, forms).set_index("form")
    for form in np.unique(forms):
        x = vectors[forms == form]
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        cos = unit @ unit.T
        n = len(x)
        assert got.loc[form, "self_similarity"] == pytest.approx((cos.sum() - n) / (n * (n - 1)), abs=1e-12)
        assert got.loc[form, "n"] == n
    blocks = self_similarity_by_form(vectors, forms, transform=lambda block: block - 0.5, block_rows=7).set_index(
        "form"
    )
    whole = self_similarity_by_form(vectors - 0.5, forms).set_index("form")
    assert np.allclose(blocks["self_similarity"], whole["self_similarity"], rtol=0, atol=1e-12)


def test_identical_vectors_have_self_similarity_one_and_a_single_occurrence_none():
    vectors = np.tile([[1.0, 2.0, 3.0]], (4, 1))
    got = self_similarity_by_form(np.vstack([vectors, [[0.5, 0.0, 1.0]]]), np.array(["a"] * 4 + ["b"])).set_index(
        "form"
    )
    assert got.loc["a", "self_similarity"] == pytest.approx(1.0)
    assert np.isnan(got.loc["b", "self_similarity"])


def _store():
    units = pd.DataFrame({
        "row": [0, 1, 2, 3, 4, 5], "sentence_id": [0, 0, 0, 1, 1, 1], "word_position": [0, 1, 2, 0, 1, 1],
        "unit": ["Bank", "bank", "side", "the", "river", "##bank"], "token_first": [0, 1, 2, 0, 1, 2],
        "token_last": [0, 1, 2, 0, 1, 2],
    })  # fmt: skip
    spacy_words = pd.DataFrame(
        {
            "sentence_id": [0, 0, 0, 1, 1],
            "position": [0, 1, 2, 0, 1],
            "word": ["Bank", "bank", "side", "the", "riverbank"],
        }
    )
    occurrences = pd.DataFrame({"word": ["Bank", "bank", "side", "##bank"], "row": [0, 1, 2, 5]})
    return units, spacy_words, occurrences


def test_a_decoder_loses_its_sentence_initial_occurrences_and_a_piece_inside_a_longer_word_never_counts():
    units, spacy_words, occurrences = _store()
    decoder, dropped = sts_occurrences(occurrences, units, spacy_words, decoder=True)
    assert decoder["row"].tolist() == [1, 2] and dropped == {"not_whole_word": 1, "sentence_initial": 1}
    encoder, dropped = sts_occurrences(occurrences, units, spacy_words, decoder=False)
    assert encoder["row"].tolist() == [0, 1, 2] and encoder["form"].tolist() == ["bank", "bank", "side"]
    assert dropped["sentence_initial"] == 0


def test_a_usage_has_the_row_of_the_unit_that_is_its_whole_word():
    units, _, _ = _store()
    usages = pd.DataFrame(
        {
            "usage_id": [0, 1, 2],
            "sentence_id": [0, 1, 1],
            "position": [1, 1, 0],
            "form_lower": ["bank", "riverbank", "the"],
        }
    )
    assert usage_row_numbers(usages, units).tolist() == [1, -1, 3]


def test_own_and_next_tokens_come_from_the_plan_and_the_unigram_counts_from_every_sentence():
    tokens = pd.DataFrame({"sentence_id": [0, 1], "input_ids": [[5, 6, 7], [8, 9]]})
    occurrences = pd.DataFrame({"sentence_id": [0, 0, 1], "token_last": [0, 2, 0]})
    own, following, counts = token_ids_of(tokens, occurrences)
    assert own.tolist() == [5, 7, 8] and following.tolist() == [6, -1, 9]
    assert counts[5] == 1 and counts.sum() == 5


def test_a_word_seed_is_stable_and_differs_between_words():
    assert word_seed(7, "bank") == word_seed(7, "bank") != word_seed(7, "plant")


def _rows(
    model="m",
    layers=3,
    auroc=(0.5, 0.7, 0.8),
    ci_low=(0.45, 0.65, 0.75),
    delta_p=(0.5, 0.001, 0.001),
    beta=((-0.01, -0.1, 0.1), (-0.02, -0.1, 0.08), (0.0, -0.1, 0.1)),
):
    rows = Rows(model, 0)
    for layer in range(layers):
        rows.layer = layer
        rows.add("separation", "auroc_same_sense", "centred", auroc[layer], null=0.5, ci=(ci_low[layer], 1.0), n=100)
        rows.add("separation", "delta_within_between", "centred", 0.1, p=delta_p[layer], ci=(0.0, 0.2), n=10)
        rows.add("context", "mean_self_similarity", "centred", 0.9 - 0.3 * layer, n=50)
        value, low, high = beta[layer]
        rows.add("polysemy", "beta_log_synsets", "centred", value, ci=(low, high), n=40)
        rows.add("polysemy", "beta_context_diversity", "centred", -0.5, ci=(-0.7, -0.3), n=40)
        rows.add("output_layer", "own_token_top1", "hidden", np.nan, note="not measurable on this model: no head")
    return rows.frame()


def test_the_claims_read_their_rows():
    claims = sense_claims({"m": _rows()}, {"m": pd.Series([0.05, 0.3, 0.4])}, {"m": "M"}).set_index("claim")
    assert claims.loc["W1", "status"] == HOLDS  # 0.9 -> 0.3
    assert claims.loc["W2", "status"] == HOLDS
    assert claims.loc["W3a", "status"] == HOLDS  # layers 1-2 above the control with p < 0.05
    assert claims.loc["W3b", "status"] == NA and claims.loc["W3c", "status"] == NA
    assert "no head" in claims.loc["W3c", "evidence"]
    assert claims.loc["W4", "status"] == HOLDS  # polysemy's interval spans 0, diversity's is below it


def test_separation_no_better_than_the_layer_zero_control_fails():
    flat = _rows(auroc=(0.6, 0.58, 0.59), ci_low=(0.55, 0.54, 0.55))
    claims = sense_claims({"m": flat}, {"m": pd.Series([0.0, 0.01, 0.02])}, {"m": "M"}).set_index("claim")
    assert claims.loc["W3a", "status"] == FAILS and claims.loc["W2", "status"] == FAILS


def _full_rows(
    gain_low=0.02,
    strata_low=0.55,
    pseudo_p=1e-6,
    beta_above=False,
    b5=(13, 20000),
    b4=(242, 20000),
    shape_gain_low=0.01,
    split_rows=True,
    content=(-0.05, (-0.2, 0.1)),
):
    """Every measure the reworded claims read, on three layers (0 the control)."""
    rows = Rows("m", 0)
    for layer in range(3):
        rows.layer = layer
        add = lambda measure, value, **kw: rows.add("x", measure, "centred", value, **kw)  # noqa: E731
        add("auroc_same_sense", 0.5 + 0.05 * layer, null=0.5, ci=(0.48 + 0.05 * layer, 0.6 + 0.05 * layer), n=100)
        add(
            "auroc_same_token",
            0.5 if layer == 0 else 0.55,
            ci=(0.45, 0.65),
            n=90,
            note="pairs of the same stored token sequence only: 10 of 100 usable pairs have different stored tokens",
        )
        add("auroc_stratified", 0.56, ci=(strata_low, 0.6), n=100)
        add("auroc_shape", 0.58, ci=(0.55, 0.61), n=100)
        add("auroc_cosine_shape", 0.62, ci=(0.6, 0.64), n=100)
        add("heldout_balanced_accuracy", 0.57, ci=(0.55, 0.59), n=100)
        add("heldout_balanced_accuracy_shape", 0.56, ci=(0.54, 0.58), n=100)
        add("auroc_gain_over_shape", 0.04, ci=(shape_gain_low, 0.07), p=1 / 201, n=100, note="(floor 0.005)")
        add("auroc_macro", 0.55, ci=(0.5, 0.6), n=30)
        add("auroc_same_sense_coarse", 0.65, ci=(0.6, 0.7), n=50)
        add("delta_within_between", 0.04, p=1 / 1001, ci=(0.02, 0.06), n=30, note="... (floor 0.001)")
        add("knn_accuracy", 0.2, null=0.15, ci=(0.18, 0.22), n=60)
        add("knn_chance", 0.12, n=60)
        add("knn_ceiling", 0.7, n=60)
        if layer:
            add("auroc_minus_layer0", 0.05 * layer, ci=(gain_low, 0.1), p=1 / 1001, n=100, note="(floor 0.001)")
        add("delta_cluster_index", -0.01, ci=(-0.03, 0.01), p=0.4, n=100)
        add("delta_cluster_index_pseudo", -0.3, ci=(-0.4, -0.2), p=pseudo_p, n=80)
        if split_rows:
            add("delta_cluster_index_two_senses", -0.1, ci=(-0.15, -0.05), p=1e-4, n=90)
            add("w3b_detectable_split_share", 0.15 + 0.01 * layer, n=120)
        for suffix, share in (("", 0.02), ("_mono", 0.0), ("_pseudo", 0.4)):
            add(f"share_gaussian_null_rejected{suffix}", share, n=50)
        add("alignment_median_rank", b4[0], null=b4[1], n=500)
        add("prediction_alignment_median_rank", b5[0], null=b5[1], n=500)
        add("prediction_alignment_share_rank_lt_10", 0.48, null=0.0, n=500)
        add("prediction_vs_alignment_rank_median_difference", b5[0] - b4[0], p=1e-6 if b5[0] < b4[0] else 0.5, n=500)
        add("prediction_vs_alignment_rank_share_lower", 0.8 if b5[0] < b4[0] else 0.3, null=0.1, n=500)
        add(
            "beta_log_synsets_frequency",
            0.1 if (beta_above and layer == 1) else -0.01,
            ci=(0.02, 0.2) if (beta_above and layer == 1) else (-0.1, 0.08),
            n=2000,
        )
        add("beta_context_diversity_frequency", -0.4, ci=(-0.5, -0.3), n=2000)
        if content is not None:
            add("beta_log_synsets_content", content[0], ci=content[1], n=900)
            add("beta_context_diversity_content", -0.3, ci=(-0.45, -0.15), n=900)
    table = rows.frame()
    table["family"] = "separation"
    return table


def test_w3a_leads_with_the_gain_over_shape_and_names_its_layer_0_control():
    """W3a's evidence: the gain over shape first, the accuracy beside shape alone's, layer 0 named from its own rows."""
    evidence = sense_claims({"m": _full_rows()}, {}, {}).set_index("claim").loc["W3a", "evidence"]
    assert evidence.startswith(
        "gain of cosine + shape over shape alone (held out by lemma) at layer 2: +0.040 [0.010, 0.070]"
    )
    assert "0.570 [0.550, 0.590] against 0.560 [0.540, 0.580] from shape alone" in evidence
    assert "same-token pairs identical, chance by construction" in evidence  # layer 0's same-token AUROC is 0.5
    assert (
        sense_claims({"m": _full_rows(shape_gain_low=-0.01)}, {}, {}).set_index("claim").loc["W3a", "status"] == FAILS
    )
    shaped = _full_rows()
    shaped.loc[(shaped["measure"] == "auroc_same_token") & (shaped["layer"] == 0), "value"] = 0.53
    assert "a shape control" in sense_claims({"m": shaped}, {}, {}).set_index("claim").loc["W3a", "evidence"]


def test_w3b_says_not_detected_beside_both_positive_controls_and_its_power():
    evidence = sense_claims({"m": _full_rows()}, {}, {}).set_index("claim").loc["W3b", "evidence"]
    assert evidence.startswith("sense clusters not detected")
    assert "pseudo-words - mono" in evidence and "two-senses - mono -0.100 to -0.100, detected in 3 of 3" in evidence
    assert "none detected in 0 of 3 layers even with every polysemous word split, detected once 15%-17%" in evidence
    older = sense_claims({"m": _full_rows(split_rows=False)}, {}, {}).set_index("claim").loc["W3b", "evidence"]
    assert "no two-senses control in this table" in older


def test_the_reworded_claims_read_the_controls():
    from contextuality.report.senses import format_p, sensitivity

    claims = sense_claims({"m": _full_rows()}, {"m": pd.Series([0.05, 0.3, 0.4])}, {"m": "M"}).set_index("claim")
    assert claims.loc["W3a", "status"] == HOLDS
    assert "p ≤ 0.001" in claims.loc["W3a", "evidence"] and "ceiling 0.700" in claims.loc["W3a", "evidence"]
    assert claims.loc["W3b", "status"] == FAILS and "positive control" in claims.loc["W3b", "evidence"]
    assert claims.loc["W3c", "status"] == HOLDS and "B5" in claims.loc["W3c", "evidence"]
    assert "same tokens" in claims.loc["W3c", "evidence"] and "tied embeddings" in claims.loc["W3c", "evidence"]
    assert claims.loc["W4", "status"] == HOLDS
    # not beyond the strata of the length difference: W3a fails; the positive control blind: W3b N/A
    assert sense_claims({"m": _full_rows(strata_low=0.45)}, {}, {}).set_index("claim").loc["W3a", "status"] == FAILS
    assert sense_claims({"m": _full_rows(gain_low=-0.01)}, {}, {}).set_index("claim").loc["W3a", "status"] == FAILS
    assert sense_claims({"m": _full_rows(pseudo_p=0.3)}, {}, {}).set_index("claim").loc["W3b", "status"] == NA
    # B5 no closer than B4: W3c fails; a beta interval above zero is flagged by its layer
    assert sense_claims({"m": _full_rows(b5=(300, 20000))}, {}, {}).set_index("claim").loc["W3c", "status"] == FAILS
    flagged = sense_claims({"m": _full_rows(beta_above=True)}, {}, {}).set_index("claim").loc["W4"]
    assert "ABOVE 0 in layer(s) 1" in flagged["evidence"]
    assert format_p(1 / 1001, 1 / 1001) == "≤ 0.001" and format_p(0.0123) == "0.012"
    moved = sensitivity({"m": _full_rows()}, {"m": pd.Series([0.05, 0.3, 0.4])}, {"m": "M"})
    assert set(moved["threshold"]) == {
        "W1 self-similarity drop",
        "W2 cone cosine",
        "W2 share of layers",
        "W3a alpha",
        "W3b alpha",
        "W4 polysemy share",
        "W4 diversity share",
    }
    assert {"at_half", "as_set", "at_one_and_a_half", "changes"} <= set(moved.columns)


def test_w4_takes_its_verdict_from_the_content_words_with_all_forms_beside_it():
    # content words: log senses' interval below 0 in both layers above the input (one cluster per sense);
    # all forms: it spans 0 (the paper's reading). The two disagree, and the verdict is the content words'.
    claims = sense_claims({"m": _full_rows(content=(-0.14, (-0.2, -0.08)))}, {}, {}).set_index("claim")
    w4 = claims.loc["W4"]
    assert w4["status"] == FAILS
    assert w4["evidence"].startswith("tagged content words (the verdict): ")
    assert "below 0 with its 95% interval in 2 of 2 layers" in w4["evidence"]
    assert "beside it, all word forms (stopwords and numerals in)" in w4["evidence"]
    assert w4["evidence"].endswith("(all word forms alone: HOLDS)")
    # the other way round: content words span 0, all forms above it in one of two layers (fails alone)
    other = sense_claims({"m": _full_rows(beta_above=True)}, {}, {}).set_index("claim").loc["W4"]
    assert other["status"] == HOLDS and other["evidence"].endswith("(all word forms alone: FAILS)")
    # no content-word rows (an older run, or no tagger): the all-forms version decides, and says so
    alone = sense_claims({"m": _full_rows(content=None)}, {}, {}).set_index("claim").loc["W4"]
    assert alone["status"] == HOLDS and "no content-word version in this table" in alone["evidence"]


def test_a_usage_has_its_sentence_length_and_the_key_of_its_stored_token_sequence():
    from contextuality.senses.job import _token_note, sentence_lengths, usage_token_keys

    units = pd.DataFrame(
        {
            "row": [0, 1, 2, 3],
            "sentence_id": [0, 0, 1, 2],
            "word_position": [1, 2, 1, 0],
            "unit": ["Bank", "of", "bank", "bank"],
            "token_first": [1, 3, 2, 0],
            "token_last": [2, 3, 2, 0],
        }
    )
    tokens = pd.DataFrame({"sentence_id": [0, 1, 2], "input_ids": [[9, 5, 6, 7], [9, 8, 4], [4, 1]]})
    usages = pd.DataFrame(
        {
            "usage_id": [0, 1, 2, 3],
            "sentence_id": [0, 1, 2, 1],
            "position": [1, 1, 0, 1],
            "form": ["Bank", "bank", "bank", "bank"],
            "form_lower": ["bank"] * 4,
        }
    )
    keys = usage_token_keys(np.array([0, 2, 3, -1]), units, tokens)
    assert keys[0] != keys[1] and keys[1] == keys[2] and keys[3] == -1  # (5, 6) vs (4,) and (4,); no unit: -1
    words = pd.DataFrame({"sentence_id": [0, 0, 0, 1, 1, 2, 2, 2, 2], "position": [0, 1, 2, 0, 1, 0, 1, 2, 3]})
    assert sentence_lengths(usages, words).tolist() == [3, 2, 4, 2]
    pairs = pd.DataFrame({"usage_a": [0, 0, 1, 1], "usage_b": [1, 2, 2, 3]})
    assert _token_note(usages, pairs, keys, np.array([0, 2, 3, -1])).startswith(
        "2 of 3 usable pairs have different stored tokens (2 written differently"
    )
