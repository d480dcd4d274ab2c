"""senses/lens: the logit lens reproduces the models' own logits; ranks, frequency baseline, centroid alignment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contextuality.models.heads import OutputHead, output_head_or_reason
from contextuality.models.loading import file_digests
from contextuality.models.randommodels import build_random_model
from contextuality.senses.output.lens import (
    centroid_alignment,
    frequency_baseline_ranks,
    lens_input_mean,
    lens_inputs,
    lens_logits,
    rank_summary,
    token_ranks,
)

TEXTS = ["the bank of the river is green .", "she went to the bank to get money .",
         "a cat sat on the mat .", "the river runs past the old mill ."] * 3  # fmt: skip
SENTENCE = "the cat went to the river bank ."


def run_model(folder: Path, architecture: str, head: str | None):
    """Build a tiny random model, load its head as the pipeline would, and run the full LM on one sentence."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    build_random_model(
        architecture, TEXTS, folder, seed=5, n_hidden_layers=3, hidden_size=16, vocab_size=120, head=head
    )
    lens_head, reason = output_head_or_reason({"key": architecture, "files": file_digests(folder)}, folder)
    assert reason == ""
    auto = AutoModelForCausalLM if architecture == "gpt2" else AutoModelForMaskedLM
    model = auto.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(str(folder))(SENTENCE, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    hidden = [state[0].numpy() for state in out.hidden_states]
    return lens_head, model, hidden, out.logits[0].numpy(), ids[0].numpy()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return run_model(tmp_path_factory.mktemp("gpt2"), "gpt2", None)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return run_model(tmp_path_factory.mktemp("bert"), "bert", "masked-lm")


def layer_norm(x, weight, bias, eps):
    x = x.astype(np.float64)
    centred = x - x.mean(1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(1, keepdims=True) + eps) * weight + bias


def test_decoder_last_layer_reproduces_logits(gpt2):
    head, _, hidden, logits, _ = gpt2
    np.testing.assert_allclose(lens_logits(head, hidden[-1], after_final_norm=True), logits, atol=1e-5)


def test_decoder_lower_layers_use_the_final_norm(gpt2):
    """lens(h_ℓ) = E·ln_f(h_ℓ) for ℓ < L, with ln_f computed here from its weights."""
    head, model, hidden, _, _ = gpt2
    ln_f = model.transformer.ln_f
    weight, bias = ln_f.weight.detach().numpy(), ln_f.bias.detach().numpy()
    embeddings = model.transformer.wte.weight.detach().numpy().astype(np.float64)
    for layer in range(len(hidden) - 1):
        expected = layer_norm(hidden[layer], weight, bias, ln_f.eps) @ embeddings.T
        np.testing.assert_allclose(lens_logits(head, hidden[layer], after_final_norm=False), expected, atol=1e-5)
    # the last layer is already normed: normalising it again would change the logits
    assert not np.allclose(lens_logits(head, hidden[-1], after_final_norm=False), gpt2[3], atol=1e-5)


def test_masked_lm_reproduces_logits_at_every_layer(bert):
    head, model, hidden, logits, _ = bert
    np.testing.assert_allclose(lens_logits(head, hidden[-1], after_final_norm=False), logits, atol=1e-5)
    from scipy.special import erf

    transform = model.cls.predictions.transform
    dense_w, dense_b = transform.dense.weight.detach().numpy(), transform.dense.bias.detach().numpy()
    ln = transform.LayerNorm
    for layer in range(len(hidden) - 1):
        x = hidden[layer].astype(np.float64) @ dense_w.T + dense_b
        x = layer_norm(
            0.5 * x * (1 + erf(x / np.sqrt(2))), ln.weight.detach().numpy(), ln.bias.detach().numpy(), ln.eps
        )
        expected = x @ head.unembedding.astype(np.float64).T + head.bias
        np.testing.assert_allclose(lens_logits(head, hidden[layer], after_final_norm=False), expected, atol=1e-5)
    with pytest.raises(ValueError, match="after_final_norm is true for a masked LM"):
        lens_logits(head, hidden[-1], after_final_norm=True)


@pytest.mark.parametrize("batch_rows", [1, 3, 1024])
def test_ranks_match_brute_force_in_any_batching(gpt2, batch_rows):
    head, _, hidden, logits, ids = gpt2
    ranks = token_ranks(head, hidden[-1], ids, after_final_norm=True, batch_rows=batch_rows)
    z = lens_logits(head, hidden[-1], after_final_norm=True)
    assert ranks.tolist() == [int((row > row[t]).sum()) for row, t in zip(z, ids)]
    # own and next token (B1, B2) in one pass; the last row has no next token
    both = np.stack([ids, np.append(ids[1:], -1)], 1)
    ranks2 = token_ranks(head, hidden[-1], both, after_final_norm=True, batch_rows=batch_rows)
    assert ranks2[:, 0].tolist() == ranks.tolist() and ranks2[-1, 1] == -1
    assert ranks2[:-1, 1].tolist() == [int((row > row[t]).sum()) for row, t in zip(z[:-1], ids[1:])]
    assert rank_summary(ranks2[:, 1])["n"] == len(ids) - 1


def hand_head(unembedding, bias=None) -> OutputHead:
    unembedding = np.asarray(unembedding, dtype=np.float32)
    return OutputHead("causal", True, unembedding, bias, unembedding)


def test_identity_head_ranks_the_largest_coordinate_first():
    head = hand_head(np.eye(6))
    hidden = np.eye(6)[[2, 4, 0]] * 3 + 0.1
    assert token_ranks(head, hidden, np.array([2, 4, 0]), after_final_norm=False).tolist() == [0, 0, 0]
    # ties are not counted against the token: all other coordinates tie at 0.1 below it
    assert token_ranks(head, hidden, np.array([1, 1, 1]), after_final_norm=False).tolist() == [1, 1, 1]
    with_bias = hand_head(np.eye(6), bias=np.array([0, 0, 0, 0, 0, 10], dtype=np.float32))
    assert token_ranks(with_bias, hidden, np.array([2, 4, 0]), after_final_norm=False).tolist() == [1, 1, 1]


def test_rank_summary():
    summary = rank_summary(np.array([0, 0, 3, 15]))
    assert summary == {"top1": 0.5, "top10": 0.75, "median_rank": 1.5,
                       "mean_log2_rank": pytest.approx((0 + 0 + 2 + 4) / 4), "n": 4}  # fmt: skip
    assert rank_summary([])["n"] == 0


def test_frequency_baseline_matches_brute_force():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 8, size=50)  # many ties
    ids = rng.integers(0, 50, size=200)
    expected = [int((counts > counts[t]).sum()) for t in ids]
    assert frequency_baseline_ranks(ids, counts).tolist() == expected
    with pytest.raises(ValueError, match="token_ids must be integer ids in 0..49"):
        frequency_baseline_ranks([50], counts)


def test_centroid_alignment_rows_as_centroids():
    rng = np.random.default_rng(1)
    head = hand_head(rng.normal(size=(300, 12)))
    words = np.arange(0, 300, 7)
    null = (words + 1) % 300
    mean = head.unembedding.astype(np.float64).mean(0)  # the lens inputs' mean equals ē here
    result = centroid_alignment(head, head.unembedding[words], words, null, after_final_norm=True, layer_mean=mean)
    assert (result["rank"] == 0).all() and np.allclose(result["cos"], 1, atol=1e-5)
    assert (result["null_rank"] > 0).all()
    summary = result["summary"]
    assert summary["median_rank"] == 0 and summary["null_median_rank"] > 10 and summary["share_rank_lt_10"] == 1
    assert summary["chance_share"] == 10 / 300 and summary["n"] == len(words)
    assert summary["null_mean_cos"] < summary["mean_cos"]


def test_centroid_alignment_uses_the_head_map(bert):
    """A masked LM's B4 maps the centroid through T and subtracts the mean of the transformed rows."""
    head, _, hidden, _, ids = bert
    mean = lens_input_mean(head, hidden[1], after_final_norm=False)
    np.testing.assert_allclose(mean, lens_inputs(head, hidden[1], after_final_norm=False).mean(0), atol=1e-6)
    result = centroid_alignment(head, hidden[1][:3], ids[:3], ids[3:6], after_final_norm=False, layer_mean=mean)
    query = lens_inputs(head, hidden[1][:3], after_final_norm=False) - mean
    rows = head.unembedding - head.unembedding.mean(0)
    cos = (query @ rows.T) / np.linalg.norm(query, axis=1)[:, None] / np.linalg.norm(rows, axis=1)
    np.testing.assert_allclose(result["cos"], cos[np.arange(3), ids[:3]], atol=1e-5)


def test_bad_input_is_refused(gpt2):
    head, _, hidden, _, ids = gpt2
    with pytest.raises(ValueError, match="the head needs rows of size 16"):
        token_ranks(head, hidden[-1][:, :8], ids, after_final_norm=True)
    with pytest.raises(ValueError, match="hidden holds NaN or infinite values"):
        token_ranks(head, np.where(hidden[-1] > 0, np.nan, hidden[-1]), ids, after_final_norm=True)
    with pytest.raises(ValueError, match=f"outside -1..{head.vocab_size - 1}"):
        token_ranks(head, hidden[-1], ids + 1000, after_final_norm=True)
    with pytest.raises(ValueError, match=r"integer token ids of shape \(n,\) or \(n, k\), n = 32 rows"):
        token_ranks(head, hidden[-1], ids[:-1], after_final_norm=True)


def test_llama_type_decoder_uses_its_rms_norm(tmp_path):
    """SmolLM2's path: a tied Llama whose final RMSNorm (``model.norm``) the lens applies below the last layer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=90, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=64)  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # a non-trivial gain, so that forgetting it would show
        model.model.norm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(tmp_path, safe_serialization=True)
    head, reason = output_head_or_reason({"key": "llama", "files": file_digests(tmp_path)}, tmp_path)
    assert reason == "" and head.kind == "causal" and head.tied
    ids = torch.tensor([[1, 5, 9, 33, 2]])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    hidden = [state[0].numpy() for state in out.hidden_states]
    np.testing.assert_allclose(lens_logits(head, hidden[-1], after_final_norm=True), out.logits[0].numpy(), atol=1e-5)
    h = hidden[1].astype(np.float64)
    normed = h / np.sqrt((h**2).mean(1, keepdims=True) + config.rms_norm_eps) * model.model.norm.weight.detach().numpy()
    expected = normed @ model.model.embed_tokens.weight.detach().numpy().astype(np.float64).T
    np.testing.assert_allclose(lens_logits(head, hidden[1], after_final_norm=False), expected, atol=1e-5)


def sense_settings(**changes):
    from contextuality.core.settings import SenseSettings

    values = dict(enabled=True, max_lemmas=None, permutations=19, bootstrap=99, cluster_words=2, cluster_subsample=4,
                  cluster_subsamples=1, cluster_components=1, cluster_null_draws=0, lens_rows=10, alignment_words=30,
                  masked_words=0, regression_min_occurrences=2)  # fmt: skip
    return SenseSettings(**(values | changes))


def synthetic_output(head, own, following, x):
    """B1-B5's rows of one layer for hand-made occurrences: one sentence per occurrence, [own, following] its
    tokens (following -1: the sentence ends), every occurrence a single piece."""
    from contextuality.senses.output.layer import output_layer_rows, prepare_output
    from contextuality.senses.rows import Rows

    n = len(own)
    tokens = pd.DataFrame({"sentence_id": np.arange(n),
                           "input_ids": [[a] if b < 0 else [a, b] for a, b in zip(own, following)]})  # fmt: skip
    occurrences = pd.DataFrame({"row": np.arange(n), "sentence_id": np.arange(n), "token_first": 0, "token_last": 0,
                                "form": [f"w{t}" for t in own], "word": [f"w{t}" for t in own]})  # fmt: skip
    prepared = prepare_output(tokens, occurrences, head, sense_settings(), 0)
    rows = Rows("m", 3)
    words = pd.DataFrame({"form": sorted(set(occurrences["form"]))})
    words = output_layer_rows(rows, words, x, occurrences, prepared, head, "", sense_settings(), 0,
                              after_final_norm=True)  # fmt: skip
    return prepared, rows.frame().set_index("measure"), words


def test_b4_and_b5_are_ranked_on_the_same_tokens():
    """Positions followed by token v hold e_v plus noise and their own token is unrelated: B5 ranks v's row first,
    B4 does not, on one sample of tokens (those with >= 5 occurrences as a word and >= 5 positions followed by
    them), compared paired; a token with only one of the two is left out of both."""
    rng = np.random.default_rng(3)
    head = hand_head(rng.normal(size=(200, 16)))
    tokens = np.arange(0, 200, 5)  # 40 tokens, each 8 times as a word and 8 times as the next token
    own = np.tile(tokens, 8)
    following = np.roll(own, 7)  # a token's occurrences are followed by other tokens
    following[:8] = 199  # 199: followed by it 8 times, never a word itself
    x = (head.unembedding[np.maximum(following, 0)] + rng.normal(size=(own.size, 16)) * 0.3).astype(np.float32)
    prepared, table, words = synthetic_output(head, own, following, x)
    assert 199 not in set(prepared.aligned["token"]) and len(prepared.aligned) == 30  # alignment_words
    assert set(prepared.aligned["token"]) <= set(tokens)
    assert table.loc["prediction_alignment_median_rank", "value"] == 0
    assert table.loc["prediction_alignment_median_rank", "null"] > 10
    assert table.loc["alignment_median_rank", "value"] > 10
    assert table.loc["alignment_median_rank", "n"] == table.loc["prediction_alignment_median_rank", "n"] == 30
    difference = table.loc["prediction_vs_alignment_rank_median_difference"]
    assert difference["value"] < 0 and difference["p"] < 1e-4 and difference["n"] == 30
    assert table.loc["prediction_vs_alignment_rank_share_lower", "value"] == 1
    assert np.isnan(table.loc["alignment_input_median_rank", "value"])  # tied: said in the note
    assert "tied" in table.loc["alignment_input_median_rank", "note"]
    assert words["alignment_rank"].notna().sum() == 30


def test_paired_rows_match_scipy_and_brute_force():
    from scipy.stats import wilcoxon

    from contextuality.senses.output.rows import add_paired_rows
    from contextuality.senses.rows import Rows

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 50, 40), rng.integers(0, 60, 40)
    rows = Rows("m", 0)
    add_paired_rows(rows, "x", a, b, "a minus b")
    table = rows.frame().set_index("measure")
    assert table.loc["x_median_difference", "value"] == np.median(a - b)
    assert table.loc["x_median_difference", "p"] == pytest.approx(wilcoxon(a, b).pvalue)
    assert table.loc["x_share_lower", "value"] == np.mean(a < b)
    assert table.loc["x_share_lower", "null"] == np.mean(a > b)


def test_untied_b4_is_ranked_against_each_matrix():
    """Occurrences hold their token's *input* row plus noise, the output rows are unrelated: B4 ranks the input
    row first and the output row far down, and the paired difference says so."""
    rng = np.random.default_rng(4)
    inputs, outputs = rng.normal(size=(150, 16)).astype(np.float32), rng.normal(size=(150, 16)).astype(np.float32)
    head = OutputHead("causal", False, outputs, None, inputs)
    own = np.tile(np.arange(0, 150, 3), 6)  # 50 tokens, 6 occurrences each
    following = np.roll(own, 1)
    x = (inputs[own] + rng.normal(size=(own.size, 16)) * 0.3).astype(np.float32)
    _, table, _ = synthetic_output(head, own, following, x)
    assert table.loc["alignment_input_median_rank", "value"] == 0
    assert table.loc["alignment_median_rank", "value"] > 10
    difference = table.loc["alignment_output_vs_input_rank_median_difference"]
    assert difference["value"] > 10 and difference["p"] < 1e-4
