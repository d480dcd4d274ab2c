"""W3c, the output row near the contexts' average, on one model's sense table: B5 against B4 on the same tokens
(paired), what tied embeddings leave open (an untied model's B4 against each matrix), and a masked LM's own-token
rank and B4 at masked positions (``senses.output.layer``, ``senses.output.masked``)."""

from __future__ import annotations

from contextuality.report.sense_table import ALPHA, FAILS, HOLDS, NA, format_p, rows_of


def w3c(table, t) -> tuple[str, str]:
    """W3c's verdict and evidence on one model's sense table (``report.senses.SENSE_CLAIMS``)."""
    rank = rows_of(table, "alignment_median_rank")
    pred = rows_of(table, "prediction_alignment_median_rank")
    if rank.empty or not rank["value"].notna().any():
        notes = table[table["family"] == "output_layer"]["note"].dropna()
        return NA, notes.iloc[0] if len(notes) else "no output layer"
    last = int(rank.index.max())
    upper = rank.loc[1:]
    better = upper[upper["value"] < upper["null"]]
    b4 = (
        f"B4, the token's own centroid: median rank {rank.loc[last, 'value']:.0f} of its own row at the last layer "
        f"(null {rank.loc[last, 'null']:.0f}), {rank.loc[1, 'value']:.0f} already at layer 1 (null "
        f"{rank.loc[1, 'null']:.0f}), better than the null in {len(better)} of {len(upper)} layers 1-{last}; "
        + _w3c_matrices(table, last)
        + _w3c_masked(table, last)
    )
    if pred.empty or not pred["value"].notna().any():
        return NA, f"{b4}; B5 (the contexts followed by a token) applies to a decoder only"
    share = rows_of(table, "prediction_alignment_share_rank_lt_10")
    pred_better = pred.loc[1:][pred.loc[1:, "value"] < pred.loc[1:, "null"]]
    evidence = (
        f"B5, the centroid of the contexts followed by a token: median rank {pred.loc[last, 'value']:.0f} of "
        f"that token's row at the last layer (a frequency-matched token's row: {pred.loc[last, 'null']:.0f}), "
        f"{share.loc[last, 'value']:.0%} in the top 10 (null {share.loc[last, 'null']:.0%}); at layer 1 "
        f"{pred.loc[1, 'value']:.0f}; better than the null in {len(pred_better)} of {len(pred.loc[1:])} layers; "
        f"{b4}; n = {int(pred.loc[last, 'n'])} tokens"
    )
    paired = rows_of(table, "prediction_vs_alignment_rank_median_difference")
    if paired.empty or last not in paired.index:  # a table from before B4 and B5 were paired
        holds = pred.loc[last, "value"] < pred.loc[last, "null"] and pred.loc[last, "value"] < rank.loc[last, "value"]
        return (HOLDS if holds else FAILS), evidence + " (two different token samples: rerun for the paired test)"
    lower = rows_of(table, "prediction_vs_alignment_rank_share_lower").loc[last]
    difference = paired.loc[last]
    evidence += (
        f"; on the same tokens B5's rank minus B4's: median {difference['value']:+.0f} (Wilcoxon p "
        f"{format_p(difference['p'])}), B5 ranks the row higher for {lower['value']:.0%} of them (B4 for "
        f"{lower['null']:.0%})"
    )
    holds = pred.loc[last, "value"] < pred.loc[last, "null"] and difference["value"] < 0 and difference["p"] < ALPHA
    return (HOLDS if holds else FAILS), evidence


def _w3c_matrices(table, last: int) -> str:
    """What B4 can say about the input row: nothing beyond its rank with tied embeddings; with untied ones, its
    rank among each matrix's rows."""
    inputs = rows_of(table, "alignment_input_median_rank")
    if inputs.empty or not inputs["value"].notna().any():
        return (
            "tied embeddings (or no input-row ranks): B4 cannot tell the input row carried up the residual stream "
            "from the output layer pulling the occurrences towards it"
        )
    difference = rows_of(table, "alignment_output_vs_input_rank_median_difference").loc[last]
    return (
        f"untied embeddings: B4 against the input rows median rank {inputs.loc[last, 'value']:.0f} at the last "
        f"layer, {inputs.loc[1, 'value']:.0f} at layer 1 (output minus input rank at the last layer: median "
        f"{difference['value']:+.0f}, Wilcoxon p {format_p(difference['p'])})"
    )


def _w3c_masked(table, last: int) -> str:
    """A masked LM's own-token rank and B4 at masked positions beside the visible occurrences' (same occurrences)."""
    masked = rows_of(table, "masked_own_token_median_rank", "hidden")
    if masked.empty or last not in masked.index:
        return ""
    visible = rows_of(table, "unmasked_own_token_median_rank", "hidden").loc[last]
    top1 = rows_of(table, "masked_own_token_top1", "hidden").loc[last]
    cells = {name: rows_of(table, f"{name}_median_rank").loc[last] for name in ("masked_alignment", "unmasked_alignment",
             "masked_row", "unmasked_row")}  # fmt: skip
    return (
        f"; at masked positions (a masked LM's training target, n = {int(masked.loc[last, 'n'])} occurrences): the "
        f"head ranks the word's own token at median {masked.loc[last, 'value']:.0f} (top-1 {top1['value']:.0%}; "
        f"the same occurrences visible: {visible['value']:.0f}), the masked vector ranks its own row at median "
        f"{cells['masked_row']['value']:.0f} (visible: {cells['unmasked_row']['value']:.0f}), and B4 from the "
        f"masked vectors {cells['masked_alignment']['value']:.0f} (visible: {cells['unmasked_alignment']['value']:.0f})"
    )
