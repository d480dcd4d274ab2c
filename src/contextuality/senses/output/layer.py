"""The output layer at every layer: B1-B3, each occurrence's own and next token ranked through
the logit lens against unigram frequency; B4, the centroid of a token's occurrences as a single-piece word against
its own output row; and B5 (a decoder's), the centroid of the contexts *followed by* that token against the same row.
B4 and B5 are taken on one sample of tokens (those with enough of both) with both ranks per token, so that they
compare paired; each against a frequency-matched other token's row. Which claim applies: a decoder's training
target is the next token, a masked LM's the token itself (at masked positions only: ``output.masked``); so for a decoder
B5, not B4, is the testable form of "the output row is the average of the word's contexts" (the spec's
derivation). With tied embeddings B4 cannot tell the input row carried up the residual stream from the output layer
pulling the occurrences towards it; with untied ones B4 is ranked against each matrix."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from contextuality.core.settings import SenseSettings
from contextuality.senses.output.rows import add_alignment_rows, add_paired_rows, add_rank_rows, centroids_of

MEAN_ROWS = 10_000  # rows of the layer whose lens inputs give B4's mean m (a seeded sample)
MIN_GROUP = 5  # occurrences (B4) and positions followed (B5) a token needs: a centroid of fewer is mostly noise


@dataclass(frozen=True)
class Alignment:
    """One centroid-to-row alignment (B4, B5): its rows' prefix, whose centroids (``OutputTokens.word_members`` or
    ``next_members``), against which rows of the head ("output", or the "input" embedding rows), when it is taken
    ("always", "causal": a decoder's, "untied"), its note (``{sample}``: the tokens it is taken on), its paired
    comparison (name, first alignment's prefix, second's, what: the first's rank minus the second's), and the note
    of the NaN row where it is not taken (no row where empty)."""

    prefix: str
    members: str
    against: str
    when: str
    note: str
    paired: tuple = ()
    otherwise: str = ""


# B4 and B5 on the same tokens, both ranks per token compared paired; with untied embeddings B4 also against the
# input rows. In the table's order.
ALIGNMENTS = (
    Alignment("alignment", "word_members", "output", "always", "B4: the centroid of the token's occurrences as a word "
              "vs its own output row ({sample}); null: a frequency-matched token's row"),
    Alignment("prediction_alignment", "next_members", "output", "causal", "B5: the centroid of the stored positions "
              "followed by the token vs its row (the same tokens as B4); null: a frequency-matched token's row",
              paired=("prediction_vs_alignment_rank", "prediction_alignment", "alignment", "B5's rank minus B4's")),
    Alignment("alignment_input", "word_members", "input", "untied", "B4 against the input embedding rows (untied); "
              "the same query as B4; null: a frequency-matched token's input row",
              paired=("alignment_output_vs_input_rank", "alignment", "alignment_input",
                      "B4's rank among the output rows minus its rank among the input rows"),
              otherwise="tied embeddings: the input rows are the output rows, so B4 cannot tell the input row carried "
              "by the residual stream from the output layer's pull"),
)  # fmt: skip


@dataclass
class OutputTokens:
    """What every layer's output-layer measures share (``prepare_output``): each occurrence's own and next token
    (-1: none), the corpus's unigram counts, the aligned tokens (``token``, ``n_word``, ``n_next``, ``partner``:
    the frequency-matched token's index in the table) with the members of their centroids as (stored rows,
    index of the token) pairs, and the masked passes of a masked LM (``masked.MaskedVectors``, or None)."""

    own: np.ndarray
    following: np.ndarray
    counts: np.ndarray
    aligned: pd.DataFrame
    word_members: tuple  # B4: the token's occurrences as a single-piece word
    next_members: tuple  # B5: the stored positions followed by the token (a decoder's; empty for a masked LM)
    forms: pd.DataFrame  # code, form: the lower-cased forms of each aligned token's occurrences
    masked: object = None


def token_ids_of(tokens: pd.DataFrame, occurrences: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each occurrence's own stored piece (its word's last piece) and the next input token (-1 if none), and the
    corpus's count of every token id (the unigram baseline)."""
    lengths = tokens["input_ids"].map(len).to_numpy()
    flat = np.concatenate(tokens["input_ids"].to_numpy()) if len(tokens) else np.zeros(0, np.int64)
    starts = pd.Series(np.concatenate([[0], np.cumsum(lengths)[:-1]]), index=tokens["sentence_id"].to_numpy())
    first = starts.reindex(occurrences["sentence_id"].to_numpy()).to_numpy()
    last = occurrences["token_last"].to_numpy(dtype=np.int64)
    own = flat[first + last]
    has_next = (
        last + 1
        < pd.Series(lengths, index=tokens["sentence_id"].to_numpy())
        .reindex(occurrences["sentence_id"].to_numpy())
        .to_numpy()
    )
    following = np.where(has_next, flat[np.minimum(first + last + 1, len(flat) - 1)], -1)
    return own.astype(np.int64), following.astype(np.int64), np.bincount(flat.astype(np.int64))


def prepare_output(
    tokens: pd.DataFrame, occurrences: pd.DataFrame, head, settings: SenseSettings, seed: int
) -> OutputTokens:
    """The layer-independent part of B1-B5 (and a masked LM's masked passes), once per model."""
    own, following, counts = token_ids_of(tokens, occurrences)
    single = (occurrences["token_first"] == occurrences["token_last"]).to_numpy()
    causal = head.kind == "causal"
    size = int(max(own.max(initial=0), following.max(initial=0))) + 1
    n_word = np.bincount(own[single], minlength=size)
    n_next = np.bincount(following[following >= 0], minlength=size)
    enough = (n_word >= MIN_GROUP) & ((n_next >= MIN_GROUP) | (not causal))
    eligible = pd.DataFrame({"token": np.flatnonzero(enough), "n_word": n_word[enough], "n_next": n_next[enough]})
    aligned = eligible.sample(n=min(settings.alignment_words, len(eligible)), random_state=seed % 2**32)
    aligned = aligned.sort_values(["n_word", "token"], kind="stable").reset_index(drop=True)
    aligned["partner"] = _frequency_partners(len(aligned)) if len(aligned) >= 2 else 0
    index, rows = pd.Index(aligned["token"]), occurrences["row"].to_numpy()
    word_codes = np.where(single, index.get_indexer(own), -1)
    next_codes = index.get_indexer(following) if causal else np.full(len(rows), -1)
    members = [(rows[codes >= 0], codes[codes >= 0]) for codes in (word_codes, next_codes)]
    forms = pd.DataFrame({"code": word_codes, "form": occurrences["form"].to_numpy()})
    prepared = OutputTokens(own, following, counts, aligned, *members, forms[word_codes >= 0].drop_duplicates())
    if head.kind == "masked" and settings.masked_words > 0 and head.mask_token_id is not None and len(aligned) >= 2:
        from contextuality.senses.output.masked import masked_vectors

        prepared.masked = masked_vectors(head, tokens, occurrences, prepared, settings, seed)
    return prepared


def output_layer_rows(
    rows,
    words: pd.DataFrame,
    x,
    occurrences: pd.DataFrame,
    prepared: OutputTokens,
    head,
    head_reason: str,
    settings: SenseSettings,
    seed: int,
    *,
    after_final_norm: bool,
) -> pd.DataFrame:
    """B1-B3 (own and next-token ranks through the lens, against unigram ranks), B4 and B5 into ``rows``; the words
    table gains each aligned word's ranks. Without a head, one row saying why."""
    from contextuality.senses.output import lens

    if head is None:
        rows.add(
            "output_layer", "own_token_top1", "hidden", np.nan, note=f"not measurable on this model: {head_reason}"
        )
        return words
    target = "next token (a decoder's training target)" if head.kind == "causal" else "the token itself (masked LM)"
    own, following, counts = prepared.own, prepared.following, prepared.counts
    counts = np.pad(counts, (0, max(0, head.unembedding.shape[0] - len(counts))))
    sample = np.random.default_rng(seed).permutation(len(occurrences))[: settings.lens_rows]
    sample.sort()
    hidden = x[occurrences["row"].to_numpy()[sample]]
    both = lens.token_ranks(
        head, hidden, np.stack([own[sample], following[sample]], axis=1), after_final_norm=after_final_norm
    )  # one pass over the logits for B1 and B2
    for column, (name, ids) in enumerate((("own_token", own[sample]), ("next_token", following[sample]))):
        valid = ids >= 0
        applies = "applies" if (name == "next_token") == (head.kind == "causal") else "reference only"
        add_rank_rows(
            rows, name, both[valid, column], lens.frequency_baseline_ranks(ids[valid], counts),
            f"{head.kind} head, claim about {target}: {applies}; null: unigram frequency ranks",
        )  # fmt: skip
    layer_mean = layer_mean_of(head, x, seed, after_final_norm)
    words = _alignments(rows, words, x, prepared, head, layer_mean, after_final_norm)
    if prepared.masked is not None:
        from contextuality.senses.output.masked import masked_rows

        masked_rows(rows, x, prepared, head, counts, layer_mean)
    return words


def _frequency_partners(n: int) -> np.ndarray:
    """The null partner of each of n items sorted by frequency: its neighbour (pairs swap; an odd one out takes the
    one before)."""
    order = np.arange(n)
    partner = np.where(order % 2 == 0, np.minimum(order + 1, n - 1), order - 1)
    partner[-1] = n - 2 if n % 2 else partner[-1]
    return partner


def layer_mean_of(head, x, seed: int, after_final_norm: bool) -> np.ndarray:
    """m of B4: the mean of the lens inputs (N_f(h), or a masked LM's T(h)) over a seeded sample of the layer."""
    from contextuality.senses.output import lens

    sample = np.sort(np.random.default_rng(seed).permutation(len(x))[:MEAN_ROWS])
    return lens.lens_input_mean(head, x[sample], after_final_norm=after_final_norm)


def _alignments(rows, words: pd.DataFrame, x, prepared: OutputTokens, head, layer_mean, after_final_norm: bool):
    """B4 and B5 on the same tokens (a decoder's; a masked LM has B4 only), both ranks per token compared paired;
    with untied embeddings B4 also against the input rows."""
    from contextuality.senses.output import lens

    aligned, causal = prepared.aligned, head.kind == "causal"
    if len(aligned) < 2:
        both = " and 5 stored positions followed by it" if causal else ""
        rows.add("output_layer", "alignment_median_rank", "centred", np.nan,
                 note=f"not measurable: < 2 tokens with 5 occurrences as a single-piece word{both}")  # fmt: skip
        return words
    tokens, k = aligned["token"].to_numpy(), len(aligned)
    null = tokens[aligned["partner"].to_numpy()]

    def align(centroids, against=head):
        return lens.centroid_alignment(
            against, centroids, tokens, null, after_final_norm=after_final_norm, layer_mean=layer_mean
        )

    sample = "the same tokens as B5" if causal else "tokens with 5 occurrences as a single-piece word"
    applies = {"always": True, "causal": causal, "untied": not head.tied}
    centroids, results = {}, {}
    for alignment in ALIGNMENTS:
        if not applies[alignment.when]:
            if alignment.otherwise:
                rows.add("output_layer", f"{alignment.prefix}_median_rank", "centred", np.nan,
                         note=alignment.otherwise)  # fmt: skip
            continue
        if alignment.members not in centroids:
            centroids[alignment.members] = centroids_of(x, getattr(prepared, alignment.members), k)
        against = head if alignment.against == "output" else replace(head, unembedding=head.input_embeddings, bias=None)
        results[alignment.prefix] = align(centroids[alignment.members], against)
        add_alignment_rows(rows, alignment.prefix, results[alignment.prefix], alignment.note.format(sample=sample))
        if alignment.paired:
            name, first, second, what = alignment.paired
            add_paired_rows(rows, name, results[first]["rank"], results[second]["rank"], what)
    b4 = results["alignment"]
    ranks = pd.DataFrame({"code": np.arange(k), "alignment_rank": b4["rank"], "alignment_null_rank": b4["null_rank"]})
    ranks = ranks.merge(prepared.forms, on="code").groupby("form")[["alignment_rank", "alignment_null_rank"]]
    return words.merge(ranks.median().reset_index(), on="form", how="left")
