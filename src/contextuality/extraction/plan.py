"""The ``plan`` job: what each sentence feeds a model and which rows it stores, decided before extraction.

It tokenizes and aligns the whole corpus once (``contextuality.extraction.alignment``), writes the plan
(``tokens.parquet``, ``units.parquet``), the occurrences the measurements will use, and what the model
cannot store (``losses.json``), and stops the run here when the model would store too little to measure.
Extraction jobs read their shard's slice of the plan.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import to_terminal
from contextuality.core.settings import PlanSettings
from contextuality.corpus.words import support
from contextuality.extraction import alignment
from contextuality.extraction.alignment import Plan
from contextuality.extraction.faithful import refuse_encoder

log = logging.getLogger(__name__)


def plan_model(
    model,
    sentences: pd.DataFrame,
    words: pd.DataFrame,
    *,
    indexing: str,
    tokenization: str,
    policy: str,
    max_length: int | None = None,
) -> Plan:
    """The plan of ``model``: anything with ``tokenizer`` and ``max_length`` (a loaded Hugging Face model), or a
    model that reads spaCy words (ELMo, or None)."""
    if not hasattr(model, "tokenizer"):
        return alignment.plan_words(sentences, words)
    limit, name = max_length or model.max_length, getattr(model, "key", "")
    if tokenization == "faithful":
        return alignment.plan_faithful(model.tokenizer, sentences, words, max_length=limit, policy=policy, name=name)
    return alignment.plan_pieces(
        model.tokenizer, sentences, words, indexing=indexing, max_length=limit, policy=policy, name=name
    )


# --------------------------------------------------------------------------------------------------
# Plans on disk: tokens.parquet (one row per sentence) and units.parquet (one row per stored row)


def write_plan(plan: Plan, out_tokens: Path, out_units: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.ListArray.from_arrays(
        pa.array(plan.token_offsets.astype(np.int32)), pa.array(plan.input_ids.astype(np.int32))
    )
    table = pa.table(
        {
            "sentence_id": pa.array(plan.sentence_ids),
            "input_ids": ids,
            "truncated": pa.array(plan.truncated),
            "skipped": pa.array(plan.skipped),
        }
    )
    with atomic_path(out_tokens) as tmp:
        pq.write_table(table, tmp)
    with atomic_path(out_units) as tmp:
        plan.units.to_parquet(tmp, index=False)


def read_plan(tokens_path: Path, units_path: Path, first: int = 0, last: int | None = None) -> Plan:
    """The plan of sentences ``[first, last)`` (corpus positions), as ``Plan.slice`` would give it."""
    import pyarrow.parquet as pq

    table = pq.read_table(tokens_path)
    last = table.num_rows if last is None else last
    all_ids = table.column("sentence_id").to_numpy()
    table = table.slice(first, last - first)
    ids = table.column("input_ids").combine_chunks()
    offsets = np.asarray(ids.offsets, dtype=np.int64)
    input_ids = np.asarray(ids.values, dtype=np.int64)[offsets[0] : offsets[-1]]
    sentence_ids = table.column("sentence_id").to_numpy()
    units = pd.read_parquet(units_path)
    # the units of the sentences before this slice (all of them when the slice is past the end)
    before = int((units["sentence_id"] < all_ids[first]).sum()) if first < len(all_ids) else len(units)
    if len(sentence_ids):
        units = units[units["sentence_id"].between(sentence_ids[0], sentence_ids[-1])].reset_index(drop=True)
    else:
        units = units.iloc[:0]
    counts = units.groupby("sentence_id", sort=False).size().reindex(sentence_ids, fill_value=0).to_numpy()
    unit_offsets = np.zeros(len(sentence_ids) + 1, dtype=np.int64)
    np.cumsum(counts, out=unit_offsets[1:])
    return Plan(
        sentence_ids,
        input_ids,
        offsets - offsets[0],
        table.column("truncated").to_numpy(zero_copy_only=False),
        table.column("skipped").to_numpy(zero_copy_only=False),
        units,
        unit_offsets,
        first_row=before,
    )


def build_occurrences(
    units: pd.DataFrame,
    word_index: pd.DataFrame | None,
    indexing: str,
    min_occurrences: int,
    count: str,
    sentences: pd.DataFrame,
) -> pd.DataFrame:
    """The rows measured as word occurrences (the model's index), sorted by word then row.

    ``word``: the corpus word index joined to rows, so occurrences lost to truncation drop out.
    ``subword``: pieces that are not punctuation and pass the same threshold as the word index.
    """
    if indexing == "word":
        merged = units.merge(
            word_index.rename(columns={"position": "word_position"}), on=["sentence_id", "word_position"], how="inner"
        )
        occurrences = merged[["word", "row", "sentence_id", "position"]]
    else:
        candidates = units[~units["is_punct"]].rename(columns={"unit": "word"})
        counts = support(candidates, sentences, count)  # the word index's own threshold, on the pieces
        kept = counts.index[counts >= min_occurrences]
        occurrences = candidates[candidates["word"].isin(kept)][["word", "row", "sentence_id", "position"]]
        # the threshold is on occurrences, as for words; after truncation a word may fall below it
    occurrences = occurrences.sort_values(["word", "row"], kind="stable").reset_index(drop=True)
    sizes = occurrences.groupby("word").size()
    return occurrences[occurrences["word"].isin(sizes.index[sizes >= 2])].reset_index(drop=True)


def count_losses(plan: Plan, word_index: pd.DataFrame, occurrences: pd.DataFrame, indexing: str) -> dict:
    """What the model cannot store, counted: sentences truncated and skipped, words and indexed occurrences lost.

    ``indexed_occurrences_lost``: for ``word`` indexing, entries of the word index without a row, by
    reason (``truncated``: cut off at the model's length limit; ``skipped``: their sentence was
    skipped; ``spanning``: no piece starts in the word, because one piece spans it and the word
    before, e.g. ``cannot`` -> ``can`` + ``not``). For ``subword`` indexing, the pieces of indexed
    strings that truncation cut off or skipping dropped.
    """
    lost = plan.lost
    reasons = {reason: 0 for reason in alignment.LOSS_REASONS}
    if indexing == "word":
        index_lost = word_index.merge(lost, on=["sentence_id", "position"], how="inner")
        indexed_total = len(word_index)
        reasons.update(index_lost["reason"].value_counts().astype(int).to_dict())
    else:
        indexed = set(occurrences["word"].unique())
        for piece, reason in plan.lost_pieces:
            reasons[reason] += piece in indexed
        indexed_total = len(occurrences) + sum(reasons.values())
    words_lost = {reason: int((lost["reason"] == reason).sum()) for reason in alignment.LOSS_REASONS}
    return {
        "sentences": int(len(plan.sentence_ids)),
        "tokens": plan.n_tokens,
        "units": int(len(plan.units)),
        "sentences_truncated": int(plan.truncated.sum()),
        "sentences_skipped": int(plan.skipped.sum()),
        "words_lost": words_lost,
        "indexed_occurrences": int(indexed_total),
        "indexed_occurrences_lost": {reason: int(n) for reason, n in reasons.items()},
        "misaligned_words": int(plan.n_misaligned),
    }


def loss_warning(model: str, losses: dict, where: str | Path | None = None) -> str | None:
    """One line for the run's output when anything was lost; None when nothing was."""
    lost = losses["indexed_occurrences_lost"]
    if not (
        losses["sentences_truncated"] or losses["sentences_skipped"] or any(lost.values()) or losses["misaligned_words"]
    ):
        return None
    total = sum(lost.values())
    share = total / losses["indexed_occurrences"] if losses["indexed_occurrences"] else 0.0
    parts = [
        f"{losses['sentences_truncated']} sentences truncated",
        f"{losses['sentences_skipped']} skipped",
        f"{total} of {losses['indexed_occurrences']} indexed occurrences lost ({share:.1%}: "
        + ", ".join(f"{n} {reason}" for reason, n in lost.items())
        + ")",
    ]
    if losses["misaligned_words"]:
        parts.append(f"{losses['misaligned_words']} words read another word's position (tokenization: faithful)")
    return f"WARNING model {model}: " + "; ".join(parts) + (f" ({where})" if where else "")


class NothingToMeasureError(RuntimeError):
    """A model would store fewer indexed words than the measurements need; the message names the settings."""


def run_plan_job(
    *,
    model_key: str,
    settings: PlanSettings,
    record_path: Path,
    model_dir: Path,
    sentences_path: Path,
    words_path: Path,
    word_index_path: Path,
    out_tokens: Path,
    out_units: Path,
    out_occurrences: Path,
    out_losses: Path,
) -> dict:
    """The ``plan`` job: the model's plan, its occurrences and its losses, before any extraction."""
    from contextuality.models import loading
    from contextuality.models.kind import model_type_of
    from contextuality.models.sources import SOURCES

    record = json.loads(Path(record_path).read_text())
    sentences = pd.read_parquet(sentences_path, columns=["sentence_id", "text"])
    words = pd.read_parquet(words_path)
    word_index = pd.read_parquet(word_index_path)
    tokenized = None  # a model with no tokenizer of its own reads spaCy words
    if not SOURCES[record["source"]].reads_words:
        # the config cannot tell a downloaded model's architecture; its config.json can
        if settings.tokenization == "faithful":
            refuse_encoder(model_key, model_type_of(model_dir))
        tokenizer, max_length = loading.load_tokenizer(record, model_dir, settings.max_length)
        tokenized = type("Tokenized", (), {"tokenizer": tokenizer, "max_length": max_length, "key": model_key})
    plan, occurrences, losses = plan_occurrences(model_key, settings, tokenized, sentences, words, word_index)
    write_plan(plan, out_tokens, out_units)
    with atomic_path(out_occurrences) as tmp:
        occurrences.to_parquet(tmp, index=False)
    with atomic_path(out_losses) as tmp:
        tmp.write_text(json.dumps(losses, indent=1) + "\n")
    warning = loss_warning(model_key, losses, out_losses)
    if warning:
        log.warning(warning)
        to_terminal(warning)  # the terminal of the run (the log has it too)
    return losses


def plan_occurrences(model_key: str, settings: PlanSettings, tokenized, sentences: pd.DataFrame, words: pd.DataFrame,
                     word_index: pd.DataFrame) -> tuple[Plan, pd.DataFrame, dict]:  # fmt: skip
    """A model's plan, its occurrences and its losses (the plan job's, and ``contextuality.study``'s in memory).
    ``tokenized``: anything with ``tokenizer``, ``max_length`` and ``key`` (a loaded Hugging Face model), or None
    for a model that reads spaCy words (ELMo). Raises NothingToMeasureError when fewer than 2 words would be stored."""
    indexing, tokenization, policy = settings.indexing, settings.tokenization, settings.max_length_policy
    min_occurrences, count = settings.min_occurrences, settings.count
    if tokenized is None:
        plan, max_length = alignment.plan_words(sentences, words), None
    else:
        max_length = tokenized.max_length
        plan = plan_model(tokenized, sentences, words, indexing=indexing, tokenization=tokenization, policy=policy)
    occurrences = build_occurrences(plan.units, word_index, indexing, min_occurrences, count, sentences)
    losses = count_losses(plan, word_index, occurrences, indexing)
    losses["model"] = model_key
    n_words = occurrences["word"].nunique()
    log.info(
        "%s: %d sentences, %d tokens, %d stored units; %s indexing: %d words, %d occurrences",
        model_key,
        len(plan.sentence_ids),
        plan.n_tokens,
        len(plan.units),
        indexing,
        n_words,
        len(occurrences),
    )
    if n_words < 2:
        limit = f"models.{model_key}.max_length: {settings.max_length} (the model's limit: {max_length} tokens)"
        raise NothingToMeasureError(
            f"model '{model_key}': only {n_words} indexed word(s) would be stored, and the measurements need at least 2; "
            f"settings: {limit}, extraction.max_length_policy: {policy}, words.min_occurrences: {min_occurrences}, "
            f"models.{model_key}.indexing: {indexing}; {losses['sentences_truncated']} sentences truncated, "
            f"{losses['sentences_skipped']} skipped"
        )
    return plan, occurrences, losses
