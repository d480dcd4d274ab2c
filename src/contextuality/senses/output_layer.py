"""The output layer at every layer (spec senses.md §3(b)): B1-B3, each occurrence's own and next token ranked through
the logit lens against unigram frequency; B4, each single-piece word's centroid against its own output row and
a frequency-matched word's; and B5 (a decoder's), the centroid of the contexts *followed by* a token against that
token's row, with the same centring and the same frequency-matched null. Which claim applies: a decoder's training
target is the next token, a masked LM's the token itself (at masked positions only); so for a decoder B5, not B4, is
the testable form of "the output row is the average of the word's contexts" (the spec's derivation)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from contextuality.core.settings import SenseSettings

MEAN_ROWS = 10_000  # rows of the layer whose lens inputs give B4's mean m (a seeded sample)


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


def output_layer_rows(
    rows,
    words: pd.DataFrame,
    x,
    occurrences: pd.DataFrame,
    tokens,
    head,
    head_reason: str,
    settings: SenseSettings,
    seed: int,
    *,
    after_final_norm: bool,
) -> pd.DataFrame:
    """B1-B3 (own and next-token ranks through the lens, against unigram ranks) and B4 into ``rows``; the words
    table gains each aligned word's ranks. Without a head, one row saying why."""
    from contextuality.senses import lens

    if head is None:
        rows.add(
            "output_layer", "own_token_top1", "hidden", np.nan, note=f"not measurable on this model: {head_reason}"
        )
        return words
    target = "next token (a decoder's training target)" if head.kind == "causal" else "the token itself (masked LM)"
    own, following, counts = tokens
    counts = np.pad(counts, (0, max(0, head.unembedding.shape[0] - len(counts))))
    sample = np.random.default_rng(seed).permutation(len(occurrences))[: settings.lens_rows]
    sample.sort()
    hidden = x[occurrences["row"].to_numpy()[sample]]
    both = lens.token_ranks(
        head, hidden, np.stack([own[sample], following[sample]], axis=1), after_final_norm=after_final_norm
    )  # one pass over the logits for B1 and B2
    for column, (name, ids) in enumerate((("own_token", own[sample]), ("next_token", following[sample]))):
        valid = ids >= 0
        ranks = both[valid, column]
        baseline = lens.frequency_baseline_ranks(ids[valid], counts)
        summary, null = lens.rank_summary(ranks), lens.rank_summary(baseline)
        applies = "applies" if (name == "next_token") == (head.kind == "causal") else "reference only"
        for stat in ("top1", "top10", "median_rank", "mean_log2_rank"):
            rows.add(
                "output_layer",
                f"{name}_{stat}",
                "hidden",
                summary[stat],
                null=null[stat],
                n=summary["n"],
                note=f"{head.kind} head, claim about {target}: {applies}; null: unigram frequency ranks",
            )
    words = _alignment(rows, words, x, occurrences, own, head, settings, seed, after_final_norm)
    if head.kind == "causal":
        _prediction_alignment(rows, x, occurrences, following, head, settings, seed, after_final_norm)
    return words


def _frequency_partners(n: int) -> np.ndarray:
    """The null partner of each of n items sorted by frequency: its neighbour (pairs swap; an odd one out takes the
    one before)."""
    order = np.arange(n)
    partner = np.where(order % 2 == 0, np.minimum(order + 1, n - 1), order - 1)
    partner[-1] = n - 2 if n % 2 else partner[-1]
    return partner


def _centroids(x, rows: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """The mean (k × d, float32) of x's ``rows`` per code 0..k-1, summed in float64."""
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, codes, x[rows].astype(np.float64))
    return (sums / np.bincount(codes, minlength=k)[:, None]).astype(np.float32)


def _prediction_alignment(
    rows, x, occurrences, following, head, settings: SenseSettings, seed: int, after_final_norm: bool
) -> None:
    """B5: for each next token v with at least 5 stored positions before it, the centroid of those positions' hidden
    states against v's own output row, and a frequency-matched other token's row (as B4)."""
    from contextuality.senses import lens

    table = pd.DataFrame({"row": occurrences["row"].to_numpy(), "token": following}).query("token >= 0")
    per_token = table.groupby("token").size().rename("n")
    per_token = per_token[per_token >= 5].reset_index()
    if len(per_token) < 2:
        rows.add(
            "output_layer",
            "prediction_alignment_median_rank",
            "centred",
            np.nan,
            note="not measurable: < 2 next tokens with 5 positions",
        )
        return
    chosen = per_token.sample(n=min(settings.alignment_words, len(per_token)), random_state=seed % 2**32)
    chosen = chosen.sort_values(["n", "token"], kind="stable").reset_index(drop=True)
    partner = _frequency_partners(len(chosen))
    members = table[table["token"].isin(chosen["token"])]
    codes = pd.Index(chosen["token"]).get_indexer(members["token"])
    centroids = _centroids(x, members["row"].to_numpy(), codes, len(chosen))
    tokens = chosen["token"].to_numpy()
    sample = np.sort(np.random.default_rng(seed).permutation(len(x))[:MEAN_ROWS])
    layer_mean = lens.lens_input_mean(head, x[sample], after_final_norm=after_final_norm)
    result = lens.centroid_alignment(
        head, centroids, tokens, tokens[partner], after_final_norm=after_final_norm, layer_mean=layer_mean
    )
    summary = result["summary"]
    what = (
        "centroid of the stored positions followed by a token vs that token's row (B5); null: a frequency-matched "
        "token's row"
    )
    rows.add(
        "output_layer",
        "prediction_alignment_median_rank",
        "centred",
        summary["median_rank"],
        null=summary["null_median_rank"],
        n=len(chosen),
        note=what,
    )
    rows.add(
        "output_layer",
        "prediction_alignment_share_rank_lt_10",
        "centred",
        summary["share_rank_lt_10"],
        null=summary["null_share_rank_lt_10"],
        n=len(chosen),
        note=f"chance {summary['chance_share']:.2g}",
    )
    rows.add(
        "output_layer",
        "prediction_alignment_mean_cos",
        "centred",
        summary["mean_cos"],
        null=summary["null_mean_cos"],
        n=len(chosen),
    )


def _alignment(
    rows, words: pd.DataFrame, x, occurrences, own, head, settings: SenseSettings, seed: int, after_final_norm: bool
) -> pd.DataFrame:
    """B4: each single-piece word's centroid against its own output row, and a frequency-matched other word's."""
    from contextuality.senses import lens

    table = occurrences.assign(token=own, single=occurrences["token_first"] == occurrences["token_last"])
    per_word = table.groupby("word").agg(
        n=("row", "size"), token=("token", "first"), tokens=("token", "nunique"), single=("single", "all")
    )
    per_word = per_word[per_word["single"] & (per_word["tokens"] == 1) & (per_word["n"] >= 5)]
    if len(per_word) < 2:
        rows.add(
            "output_layer", "alignment_median_rank", "centred", np.nan, note="not measurable: < 2 single-piece words"
        )
        return words
    chosen = per_word.sample(n=min(settings.alignment_words, len(per_word)), random_state=seed % 2**32)
    chosen = chosen.sort_values(["n", "token"], kind="stable")
    # the null partner: the neighbour in frequency order (pairs swap; an odd one out takes the one before)
    order = np.arange(len(chosen))
    partner = np.where(order % 2 == 0, np.minimum(order + 1, len(chosen) - 1), order - 1)
    partner[-1] = len(chosen) - 2 if len(chosen) % 2 else partner[-1]
    members = table[table["word"].isin(chosen.index)]
    codes = pd.Index(chosen.index).get_indexer(members["word"])
    centroids = np.zeros((len(chosen), x.shape[1]))
    np.add.at(centroids, codes, x[members["row"].to_numpy()].astype(np.float64))
    centroids = (centroids / np.bincount(codes, minlength=len(chosen))[:, None]).astype(np.float32)
    tokens = chosen["token"].to_numpy()
    # m of B4: the mean of the lens inputs (N_f(h), or a masked LM's transform(h)) over a seeded sample of the layer
    sample = np.sort(np.random.default_rng(seed).permutation(len(x))[:MEAN_ROWS])
    layer_mean = lens.lens_input_mean(head, x[sample], after_final_norm=after_final_norm)
    result = lens.centroid_alignment(
        head, centroids, tokens, tokens[partner], after_final_norm=after_final_norm, layer_mean=layer_mean
    )
    summary = result["summary"]
    rows.add(
        "output_layer",
        "alignment_median_rank",
        "centred",
        summary["median_rank"],
        null=summary["null_median_rank"],
        n=len(chosen),
        note="centroid vs own row; null: a frequency-matched word's row",
    )
    rows.add(
        "output_layer",
        "alignment_share_rank_lt_10",
        "centred",
        summary["share_rank_lt_10"],
        null=summary["null_share_rank_lt_10"],
        n=len(chosen),
        note=f"chance {summary['chance_share']:.2g}",
    )
    rows.add(
        "output_layer",
        "alignment_mean_cos",
        "centred",
        summary["mean_cos"],
        null=summary["null_mean_cos"],
        n=len(chosen),
    )
    ranks = pd.DataFrame(
        {"word": chosen.index, "alignment_rank": result["rank"], "alignment_null_rank": result["null_rank"]}
    )
    ranks["form"] = ranks["word"].str.lower()
    ranks = ranks.groupby("form")[["alignment_rank", "alignment_null_rank"]].median().reset_index()
    return words.merge(ranks, on="form", how="left")
