"""The similarity stage's rows: the word occurrences every model of a run stores, joined by what they are.

Row ℓ of one model and row ℓ of another are not the same occurrence: a subword-indexed model stores more
rows than words, and two word-indexed models lose different words (a word no piece starts in, truncation at a
model's length limit, skipped sentences). So the stage compares models only on the corpus's indexed
occurrences (``word_index.parquet``, model-independent) that **every** model stores, found through each
model's ``units.parquet`` by ``(sentence_id, word_position)``: an explicit inner join, in corpus order, never
positional. A subword-indexed model counts a word when at least one of its pieces is stored, and its pieces
(consecutive rows) are pooled per word when the sample is gathered (``sample``).

``rows.parquet`` holds every common occurrence with a seeded ``draw`` (a permutation of 0..n-1 from the run's
seed): the sample is the rows with ``draw < max_rows``, the k-NN sample those with ``draw < knn_rows``
(nested), so neither setting changes this file. Every sample records the file's SHA-256, and the similarity
jobs refuse a sample made from other rows (``check_rows_digest``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.digest import sha256_of
from contextuality.store.files import StoreError

# A model's columns in rows.parquet: the stored row of the word's first piece, and how many pieces it has
FIRST_ROW, PIECES = "row_{model}", "n_pieces_{model}"
LOSS_REASONS = ("spanning", "truncated", "skipped")


def model_words(units: pd.DataFrame, model: str, units_path: str | Path = "units.parquet") -> pd.DataFrame:
    """One row per word ``model`` stores: ``sentence_id``, ``word_position``, its first stored row and its
    number of pieces (1 for a word-indexed model). Refuses a word whose pieces are not consecutive rows."""
    grouped = units.groupby(["sentence_id", "word_position"], sort=True)["row"]
    words = grouped.agg(first="min", last="max", count="size").reset_index()
    scattered = words[words["last"] - words["first"] + 1 != words["count"]]
    if len(scattered):
        first = scattered.iloc[0]
        raise StoreError(
            f"{units_path}: the pieces of word {int(first.word_position)} of sentence {int(first.sentence_id)} are "
            f"not consecutive rows ({int(first['count'])} pieces in rows {int(first['first'])}-{int(first['last'])}); "
            "the plan is damaged: delete it and rerun snakemake"
        )
    return pd.DataFrame({
        "sentence_id": words["sentence_id"].astype(np.int64),
        "word_position": words["word_position"].astype(np.int32),
        FIRST_ROW.format(model=model): words["first"].astype(np.int64),
        PIECES.format(model=model): words["count"].astype(np.int16),
    })  # fmt: skip


def common_rows(
    word_index: pd.DataFrame, stored: dict[str, pd.DataFrame], sentences: dict[str, pd.DataFrame], seed: int
) -> tuple[pd.DataFrame, dict]:
    """The indexed occurrences every model stores, in corpus order, with their seeded ``draw``, and what each
    model loses to the join (``lost``: by reason, from its plan's sentence flags).

    ``stored``: each model's ``model_words``; ``sentences``: each model's ``tokens.parquet`` (``sentence_id``,
    ``truncated``, ``skipped``)."""
    index = (
        word_index.rename(columns={"position": "word_position"})[["sentence_id", "word_position", "word"]]
        .astype({"sentence_id": np.int64, "word_position": np.int32})
        .sort_values(["sentence_id", "word_position"], kind="stable")
        .reset_index(drop=True)
    )
    rows, lost = index, {}
    for model, words in stored.items():
        found = index.merge(words, on=["sentence_id", "word_position"], how="left", indicator=True)["_merge"]
        lost[model] = _loss_reasons(index[found.to_numpy() == "left_only"], sentences[model])
        rows = rows.merge(words, on=["sentence_id", "word_position"], how="inner", sort=False)
    rows = rows.sort_values(["sentence_id", "word_position"], kind="stable").reset_index(drop=True)
    rows.insert(3, "draw", np.random.default_rng(seed).permutation(len(rows)).astype(np.int64))
    record = {"n_words": len(index), "n_common": len(rows), "models": sorted(stored), "lost": lost, "seed": seed}
    return rows, record


def _loss_reasons(missing: pd.DataFrame, sentences: pd.DataFrame) -> dict[str, int]:
    """Words of the index a model does not store, by reason: in a skipped or truncated sentence, else spanning
    (no piece starts in the word)."""
    flags = sentences.set_index("sentence_id")[["truncated", "skipped"]].reindex(missing["sentence_id"])
    skipped = flags["skipped"].fillna(False).to_numpy(bool)
    truncated = flags["truncated"].fillna(False).to_numpy(bool) & ~skipped
    counts = {"skipped": int(skipped.sum()), "truncated": int(truncated.sum())}
    return {"spanning": len(missing) - counts["skipped"] - counts["truncated"], **counts}


def write_rows(rows: pd.DataFrame, record: dict, out_parquet: Path, out_json: Path) -> None:
    """rows.parquet, then rows.json with its digest (both written under a temporary name, then renamed)."""
    with atomic_path(out_parquet) as tmp:
        rows.to_parquet(tmp, index=False)
        digest = sha256_of(tmp)
    with atomic_path(out_json) as tmp:
        tmp.write_text(json.dumps({**record, "sha256": digest}, indent=1, sort_keys=True) + "\n")


def read_rows(path: str | Path, models: list[str]) -> pd.DataFrame:
    """rows.parquet, checked: every column of every model present, ``draw`` a permutation of its rows."""
    rows = pd.read_parquet(path)
    needed = ["sentence_id", "word_position", "word", "draw"]
    needed += [column.format(model=model) for model in models for column in (FIRST_ROW, PIECES)]
    missing = [column for column in needed if column not in rows.columns]
    if missing:
        raise StoreError(f"{path}: has no column {missing[0]} (made for other models); delete it and rerun snakemake")
    draw = rows["draw"].to_numpy()
    if not np.array_equal(np.sort(draw), np.arange(len(rows))):
        raise StoreError(f"{path}: its draw column is not a permutation of 0..{len(rows) - 1}; delete it and rerun")
    return rows


def sample_size(n_common: int, max_rows: int | None) -> int:
    """Rows of the sample: ``max_rows`` of the common occurrences (all of them when fewer, or ``max_rows`` null)."""
    return n_common if max_rows is None else min(n_common, max_rows)


def sample_rows(rows: pd.DataFrame, model: str, n_sample: int) -> tuple[np.ndarray, np.ndarray]:
    """The sample of ``model`` in draw order: each word's first stored row and its piece count."""
    chosen = rows[rows["draw"].to_numpy() < n_sample].sort_values("draw", kind="stable")
    return (
        chosen[FIRST_ROW.format(model=model)].to_numpy(np.int64),
        chosen[PIECES.format(model=model)].to_numpy(np.int64),
    )


def check_rows_digest(found: str, rows_path: str | Path, sample_path: str | Path, model: str) -> None:
    """Refuse a sample gathered from other rows than ``rows_path``'s (another run's join, or a stale sample)."""
    expected = sha256_of(rows_path)
    if found != expected:
        raise StoreError(
            f"{sample_path}: model {model}'s sample was gathered from other rows (rows_sha256 {found[:12]}...) than "
            f"{rows_path} ({expected[:12]}...): the two models' rows would not be the same occurrences; delete the "
            "sample and rerun snakemake"
        )
