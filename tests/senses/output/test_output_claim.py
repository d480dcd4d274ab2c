"""W3c's verdict (report/output_claim.py): B5 against B4 on the same tokens, paired; what tied embeddings leave open;
an untied model's B4 against each matrix; a masked LM's ranks at masked positions."""

from __future__ import annotations

import numpy as np

from contextuality.report.senses import FAILS, HOLDS, NA, sense_claims
from contextuality.senses.rows import Rows


def _table(*, b5=13, b4=240, difference=(-200, 1e-6), untied=False, masked=False, decoder=True):
    rows = Rows("m", 0)
    for layer in range(3):
        rows.layer = layer

        def add(measure, value, preprocessing="centred", **kw):
            rows.add("output_layer", measure, preprocessing, value, **kw)

        add("alignment_median_rank", b4, null=20000, n=400)
        if decoder:
            add("prediction_alignment_median_rank", b5, null=20000, n=400)
            add("prediction_alignment_share_rank_lt_10", 0.4, null=0.0, n=400)
            add("prediction_vs_alignment_rank_median_difference", difference[0], p=difference[1], n=400)
            add("prediction_vs_alignment_rank_share_lower", 0.9, null=0.1, n=400)
        if untied:
            add("alignment_input_median_rank", 3, null=20000, n=400)
            add("alignment_output_vs_input_rank_median_difference", b4 - 3, p=1e-9, n=400)
        else:
            add("alignment_input_median_rank", np.nan, note="tied embeddings: ...")
        if masked:
            for view, rank in (("masked", 2), ("unmasked", 40)):
                add(f"{view}_own_token_median_rank", rank, "hidden", null=300, n=500)
                add(f"{view}_own_token_top1", 0.3, "hidden", null=0.0, n=500)
                add(f"{view}_row_median_rank", rank * 2, null=300, n=500)
                add(f"{view}_alignment_median_rank", rank * 3, null=300, n=100)
    return rows.frame()


def _w3c(table):
    return sense_claims({"m": table}, {}, {}).set_index("claim").loc["W3c"]


def test_b5_holds_only_when_it_beats_b4_on_the_same_tokens():
    claim = _w3c(_table())
    assert claim["status"] == HOLDS
    assert "on the same tokens B5's rank minus B4's: median -200" in claim["evidence"]
    assert "B5 ranks the row higher for 90%" in claim["evidence"]
    assert "tied embeddings" in claim["evidence"] and "cannot tell the input row" in claim["evidence"]
    assert _w3c(_table(difference=(-5, 0.2)))["status"] == FAILS  # not significant
    assert _w3c(_table(difference=(50, 1e-6)))["status"] == FAILS  # B4 nearer


def test_untied_and_masked_evidence():
    untied = _w3c(_table(untied=True))["evidence"]
    assert "untied embeddings: B4 against the input rows median rank 3" in untied
    masked = _w3c(_table(masked=True, decoder=False))
    assert masked["status"] == NA and "applies to a decoder only" in masked["evidence"]
    assert "at masked positions" in masked["evidence"] and "own token at median 2" in masked["evidence"]
    assert "visible: 40" in masked["evidence"] or "visible: 40)" in masked["evidence"]
