"""B1 and B4 at masked positions: the premise where it applies.

A masked LM is trained to predict a token where it is masked; at the visible occurrences the stored vectors hold,
there is (almost) no loss. So for a masked LM with its head, a sample of the aligned words (``senses.masked_words``
of B4's tokens, up to ``PER_WORD`` seeded occurrences each) is fed again with the word's piece replaced by the
mask token: one word masked a pass, many sentences a batch (batched by length), and the vector at the mask kept
at every layer. Per layer, on the same occurrences:
* B1 at the mask: the rank of the word's own token under the head (at the last layer, the head's prediction),
  beside the visible occurrence's rank (its stored vector), paired;
* the distance of each occurrence from its word's own output row (cosine and rank, centred as B4), at the mask
  and visible, paired;
* B4 at the mask: the centroid of a word's masked vectors against its own row, beside the centroid of the same
  occurrences' visible vectors, paired.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PER_WORD = 5  # occurrences of each sampled word masked (one a pass): B4's centroid at the mask is their mean
BATCH_SENTENCES = 32  # sentences of one forward pass, sorted by length so that padding stays small


@dataclass
class MaskedVectors:
    """The masked passes: each masked occurrence's stored row (its visible vector), its word's index in the
    aligned tokens, its token id, and the vector at the mask at every layer (layers × n × d, float32)."""

    rows: np.ndarray
    codes: np.ndarray
    tokens: np.ndarray
    hidden: np.ndarray


def masked_vectors(head, tokens: pd.DataFrame, occurrences: pd.DataFrame, prepared, settings, seed: int):
    """The masked passes of a seeded sample of ``prepared``'s aligned words (``output.layer.OutputTokens``)."""
    aligned = prepared.aligned
    chosen = np.random.default_rng(seed).permutation(len(aligned))[: settings.masked_words]
    rows, codes = prepared.word_members
    table = pd.DataFrame({"row": rows, "code": codes})[np.isin(codes, chosen)]
    table = table.sample(frac=1, random_state=seed % 2**32).groupby("code").head(PER_WORD).sort_values("row")
    place = occurrences.set_index("row").loc[table["row"].to_numpy(), ["sentence_id", "token_last"]]
    sequences = tokens.set_index("sentence_id")["input_ids"].loc[place["sentence_id"].to_numpy()].tolist()
    hidden = masked_hidden_states(head.model, sequences, place["token_last"].to_numpy(), head.mask_token_id)
    codes = table["code"].to_numpy()
    return MaskedVectors(table["row"].to_numpy(), codes, aligned["token"].to_numpy()[codes], hidden)


def masked_hidden_states(
    model, sequences: list, positions: np.ndarray, mask_token_id: int, batch_sentences: int = BATCH_SENTENCES
) -> np.ndarray:
    """The base model's hidden state at ``positions[i]`` of ``sequences[i]`` with that token replaced by the mask,
    at every layer (layers × n × d, float32): sequences sorted by length, padded within a batch and masked out."""
    import torch

    lengths = np.array([len(ids) for ids in sequences], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    pad = getattr(model.config, "pad_token_id", None) or 0
    out = None
    for start in range(0, len(order), batch_sentences):
        batch = order[start : start + batch_sentences]
        ids = np.full((len(batch), lengths[batch].max()), pad, dtype=np.int64)
        keep = np.arange(ids.shape[1]) < lengths[batch][:, None]
        ids[keep] = np.concatenate([np.asarray(sequences[i], dtype=np.int64) for i in batch])
        ids[np.arange(len(batch)), positions[batch]] = mask_token_id
        with torch.no_grad():
            states = model.base_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(keep.astype(np.int64)),
                                      output_hidden_states=True).hidden_states  # fmt: skip
        at = torch.from_numpy(positions[batch])
        picked = torch.stack([state[torch.arange(len(batch)), at] for state in states]).float().numpy()
        if out is None:
            out = np.empty((len(states), len(sequences), picked.shape[2]), dtype=np.float32)
        out[:, batch] = picked
    return out if out is not None else np.zeros((0, 0, 0), dtype=np.float32)


def masked_rows(rows, x, prepared, head, counts: np.ndarray, layer_mean: np.ndarray) -> dict:
    """The masked measures of one layer (``rows.layer``) into ``rows``; returns the per-occurrence and per-word
    results (``{name}``: ranks, or a ``centroid_alignment`` result) for the tests."""
    from contextuality.senses.output import lens
    from contextuality.senses.output.rows import add_alignment_rows, add_paired_rows, add_rank_rows, centroids_of

    masked, layer = prepared.masked, int(rows.layer)
    if layer >= masked.hidden.shape[0]:
        raise ValueError(f"layer {layer}: the masked passes give {masked.hidden.shape[0]} layers; the store's layers "
                         "and the model's hidden states must be the same: rerun snakemake for this model")  # fmt: skip
    views = ("masked", "unmasked")
    vectors = np.concatenate([masked.hidden[layer], x[masked.rows]])  # both views in one pass over the V rows
    tokens_of = prepared.aligned["token"].to_numpy()
    partner = tokens_of[prepared.aligned["partner"].to_numpy()]
    n = len(masked.rows)
    words, local = np.unique(masked.codes, return_inverse=True)
    k = len(words)
    centroids = [centroids_of(vectors[i * n : (i + 1) * n], (np.arange(n), local), k) for i in range(2)]
    ranks = lens.token_ranks(head, vectors, np.tile(masked.tokens, 2), after_final_norm=False)
    together = lens.centroid_alignment(head, np.concatenate([vectors, *centroids]),
                                       np.concatenate([np.tile(masked.tokens, 2), np.tile(tokens_of[words], 2)]),
                                       np.concatenate([np.tile(partner[masked.codes], 2), np.tile(partner[words], 2)]),
                                       after_final_norm=False, layer_mean=layer_mean)  # fmt: skip
    bounds = np.cumsum([0, n, n, k, k])
    out = {}
    baseline = lens.frequency_baseline_ranks(masked.tokens, counts)
    for i, view in enumerate(views):
        out[f"{view}_own_token"] = ranks[i * n : (i + 1) * n]
        add_rank_rows(rows, f"{view}_own_token", out[f"{view}_own_token"], baseline,
                      f"B1 on {n} occurrences, {view} (the same occurrences masked and visible); null: unigram frequency ranks")  # fmt: skip
        for name, part in (("row", i), ("alignment", 2 + i)):
            result = {
                key: value[bounds[part] : bounds[part + 1]] for key, value in together.items() if key != "summary"
            }
            out[f"{view}_{name}"] = result | {"summary": lens.alignment_summary(result, head.vocab_size)}
        add_alignment_rows(rows, f"{view}_row", out[f"{view}_row"], f"each {view} occurrence's vector vs its word's "
                           "own output row (centred as B4); null: a frequency-matched token's row")  # fmt: skip
        add_alignment_rows(rows, f"{view}_alignment", out[f"{view}_alignment"], f"B4 from the {view} occurrences "
                           f"(up to {PER_WORD} a word): their centroid vs the word's own row; null: a frequency-matched token's row")  # fmt: skip
    for name, what in (("own_token", "B1"), ("row", "the occurrence's rank of its own row"), ("alignment", "B4")):
        first, second = (out[f"{view}_{name}"] for view in views)
        if isinstance(first, dict):
            first, second = first["rank"], second["rank"]
        add_paired_rows(rows, f"masked_vs_unmasked_{name}_rank", first, second,
                        f"{what}: the rank at the mask minus the visible one's")  # fmt: skip
    return out
