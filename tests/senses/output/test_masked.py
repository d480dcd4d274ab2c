"""senses/masked: B1 and B4 at masked positions on a tiny random masked LM equal a per-sentence loop of the
model's own forward passes and logits (brute force), in any batching."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from contextuality.core.settings import SenseSettings
from contextuality.models.heads import output_head_or_reason
from contextuality.models.loading import file_digests
from contextuality.models.randommodels import build_random_model

TEXTS = ["the bank of the river is green .", "she went to the bank to get money .", "a cat sat on the mat .",
         "the river runs past the old mill .", "the cat went to the river bank ."] * 4  # fmt: skip


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    """A tiny random BERT with a masked-LM head, its head as the pipeline loads it, the corpus's tokens and
    occurrences (every piece that is not a special token), and its unmasked hidden states (the stored rows)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("bert")
    build_random_model("bert", TEXTS, folder, seed=5, n_hidden_layers=2, hidden_size=16, vocab_size=120,
                       head="masked-lm")  # fmt: skip
    head, reason = output_head_or_reason({"key": "bert", "files": file_digests(folder)}, folder)
    assert reason == "" and head.kind == "masked" and head.mask_token_id is not None
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForMaskedLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = [tokenizer(text)["input_ids"] for text in TEXTS]
    occurrences, states = [], []
    for sentence, sequence in enumerate(ids):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([sequence]), output_hidden_states=True).hidden_states
        for position in range(1, len(sequence) - 1):  # not [CLS], [SEP]
            piece = tokenizer.convert_ids_to_tokens(sequence[position])
            occurrences.append((len(occurrences), sentence, position, position, piece, piece))
            states.append([state[0, position].numpy() for state in out])
    occurrences = pd.DataFrame(occurrences, columns=["row", "sentence_id", "token_first", "token_last", "form", "word"])
    tokens = pd.DataFrame({"sentence_id": np.arange(len(ids)), "input_ids": ids})
    layers = np.stack(states, axis=1).astype(np.float32)  # layers × rows × d
    return head, model, tokens, occurrences, layers


def loop_at_mask(model, sequence, position, mask_id):
    """Brute force: one sentence, its word masked, the hidden states and the logits at the mask."""
    import torch

    masked = list(sequence)
    masked[position] = mask_id
    with torch.no_grad():
        out = model(input_ids=torch.tensor([masked]), output_hidden_states=True)
    return [state[0, position].numpy() for state in out.hidden_states], out.logits[0, position].numpy()


@pytest.mark.parametrize("batch_sentences", [1, 3, 32])
def test_batched_masked_passes_equal_a_per_sentence_loop(tiny_mlm, batch_sentences):
    from contextuality.senses.output.masked import masked_hidden_states

    head, model, tokens, occurrences, _ = tiny_mlm
    picked = occurrences.iloc[::4]
    sequences = tokens.set_index("sentence_id")["input_ids"].loc[picked["sentence_id"]].tolist()
    positions = picked["token_last"].to_numpy()
    got = masked_hidden_states(head.model, sequences, positions, head.mask_token_id, batch_sentences)
    want = np.stack([loop_at_mask(model, s, p, head.mask_token_id)[0] for s, p in zip(sequences, positions)], axis=1)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_masked_b1_and_b4_equal_brute_force(tiny_mlm):
    """At the last layer the rank at the mask is the rank under the model's own logits at the mask; the visible
    rank is the one under its logits without the mask; B4 at the mask is the centroid of the same occurrences."""
    from contextuality.senses.output import lens
    from contextuality.senses.output.layer import layer_mean_of, prepare_output
    from contextuality.senses.output.masked import PER_WORD, masked_rows
    from contextuality.senses.rows import Rows

    head, model, tokens, occurrences, layers = tiny_mlm
    settings = SenseSettings(
        **{field.name: 1 for field in fields(SenseSettings)} | {"alignment_words": 30, "masked_words": 4}
    )
    prepared = prepare_output(tokens, occurrences, head, settings, 0)
    masked = prepared.masked
    assert len(np.unique(masked.codes)) == min(4, len(prepared.aligned))
    assert np.bincount(masked.codes).max() <= PER_WORD and masked.hidden.shape[0] == layers.shape[0]
    last = layers.shape[0] - 1
    rows = Rows("m", last)
    x = layers[last]
    mean = layer_mean_of(head, x, 0, False)
    out = masked_rows(rows, x, prepared, head, prepared.counts, mean)
    place = occurrences.set_index("row").loc[masked.rows]
    sequences = tokens.set_index("sentence_id")["input_ids"].loc[place["sentence_id"]].tolist()
    want_masked, want_visible = [], []
    for sequence, position, token in zip(sequences, place["token_last"], masked.tokens):
        _, logits = loop_at_mask(model, sequence, position, head.mask_token_id)
        want_masked.append(int((logits > logits[token]).sum()))
        _, logits = loop_at_mask(model, sequence, position, sequence[position])  # "masked" by itself: unmasked
        want_visible.append(int((logits > logits[token]).sum()))
    assert out["masked_own_token"].tolist() == want_masked
    assert out["unmasked_own_token"].tolist() == want_visible
    words = np.unique(masked.codes)
    for view, vectors in (("masked", masked.hidden[last]), ("unmasked", x[masked.rows])):
        centroids = np.stack([vectors[masked.codes == code].astype(np.float64).mean(0) for code in words])
        tokens_of = prepared.aligned["token"].to_numpy()
        partner = tokens_of[prepared.aligned["partner"].to_numpy()]
        want = lens.centroid_alignment(head, centroids.astype(np.float32), tokens_of[words], partner[words],
                                       after_final_norm=False, layer_mean=mean)  # fmt: skip
        np.testing.assert_array_equal(out[f"{view}_alignment"]["rank"], want["rank"])
    table = rows.frame().set_index("measure")
    assert table.loc["masked_own_token_median_rank", "value"] == np.median(want_masked)
    assert table.loc["masked_vs_unmasked_own_token_rank_median_difference", "n"] == len(masked.rows)
    for name in ("masked_row_mean_cos", "unmasked_row_median_rank", "masked_alignment_median_rank",
                 "masked_vs_unmasked_alignment_rank_share_lower", "masked_vs_unmasked_row_rank_median_difference"):  # fmt: skip
        assert np.isfinite(table.loc[name, "value"])
