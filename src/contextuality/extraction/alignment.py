"""Which pieces each sentence feeds a model, and which rows it stores: the model's plan, before extraction.

A *unit* is what the measurements call a word occurrence:

* ``indexing: subword``: every model piece (WordPiece, BPE) is its own unit, as the paper did for
  BERT; its string is the piece (``##ing``, ``Ġdog``).
* ``indexing: word``: every spaCy word is a unit; its vector pools the word's pieces (``first``,
  ``last`` or ``mean``), which are contiguous, so a unit is a token range ``[first, last]``.

The whole corpus is tokenized in one batch call of the fast tokenizer, and its pieces are aligned to
spaCy words with array operations over all pieces at once: a piece belongs to the word in which its
first non-space character falls (byte-level BPE pieces carry their leading space). Special tokens go
through the model but are never stored.

What cannot be stored is counted, never dropped silently: sentences truncated (or skipped) at the
model's length limit, the words (and indexed occurrences) they lose, and words that no piece starts
in because one piece spans two spaCy words (``cannot`` -> ``can`` + ``not`` under one piece).

``tokenization: faithful`` (decoders) rebuilds the paper's GPT-2 input instead (contextuality.extraction.faithful):
spaCy tokens looked up bare, no spaces, no BOS, and word i read at token position i, misaligned after
any word that takes several pieces, exactly as the paper's code read it.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from contextuality.core.runtime import collection_paused
from contextuality.corpus.words import is_punct

log = logging.getLogger(__name__)

PIECE_MARKERS = ("##", "Ġ", "▁")
# Every code point str.isspace() accepts: offsets skip these at the start of a piece.
_SPACE_CODEPOINTS = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)
UNIT_COLUMNS = ["row", "sentence_id", "position", "unit", "word_position", "is_punct", "token_first", "token_last"]
LOSS_REASONS = ("truncated", "skipped", "spanning")


class AlignmentError(RuntimeError):
    """The sentences cannot be planned under the configured policy (an over-long sentence under 'error')."""


@dataclass
class Plan:
    """A model's input and stored rows for a run of sentences (corpus order).

    ``input_ids[token_offsets[i]:token_offsets[i+1]]`` is sentence i's model input; its units are rows
    ``unit_offsets[i]:unit_offsets[i+1]`` of ``units`` (one row per stored vector, in storage order;
    a shard's plan numbers them from 0, its column ``row`` and ``first_row`` give their place in the model),
    each the token range ``[token_first, token_last]`` of that sentence. ``lost`` lists every word
    (sentence_id, position) that has no unit, with its reason.
    """

    sentence_ids: np.ndarray
    input_ids: np.ndarray
    token_offsets: np.ndarray
    truncated: np.ndarray
    skipped: np.ndarray
    units: pd.DataFrame
    unit_offsets: np.ndarray
    lost: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["sentence_id", "position", "reason"]))
    lost_pieces: list = field(default_factory=list)  # subword indexing: (piece, reason) of every piece not stored
    n_misaligned: int = 0  # tokenization faithful: words that read another word's position
    first_row: int = 0  # row number (in the whole plan) of this plan's first unit: a shard's place in the model

    @property
    def n_tokens(self) -> int:
        return int(self.token_offsets[-1] - self.token_offsets[0])

    def slice(self, first: int, last: int) -> Plan:
        """The plan of sentences ``[first, last)`` (a shard); unit rows keep their numbers in the whole plan."""
        tokens = slice(int(self.token_offsets[first]), int(self.token_offsets[last]))
        units = self.units.iloc[int(self.unit_offsets[first]) : int(self.unit_offsets[last])].reset_index(drop=True)
        return Plan(
            self.sentence_ids[first:last],
            self.input_ids[tokens],
            self.token_offsets[first : last + 1] - tokens.start,
            self.truncated[first:last],
            self.skipped[first:last],
            units,
            self.unit_offsets[first : last + 1] - self.unit_offsets[first],
            first_row=self.first_row + int(self.unit_offsets[first]),
        )


def strip_marker(piece: str) -> str:
    for marker in PIECE_MARKERS:
        if piece.startswith(marker) and len(piece) > len(marker):
            return piece[len(marker) :]
    return piece


def _flat(lists) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated values and offsets of a list of lists (as numpy arrays)."""
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(offsets[-1]))
    return values, offsets


def _flat_pairs(lists, count: int) -> np.ndarray:
    """(count, 2) array of the (begin, end) pairs of a list of lists of pairs."""
    flat = itertools.chain.from_iterable(itertools.chain.from_iterable(lists))
    return np.fromiter(flat, dtype=np.int64, count=2 * count).reshape(count, 2)


def _encode(tokenizer, texts: list[str], max_length: int, policy: str, sentence_ids: np.ndarray, name: str):
    """Ids, offsets and special-token masks of every text; over-long ones cut (keeping specials) or refused."""
    options = {"add_special_tokens": True, "return_offsets_mapping": True, "return_special_tokens_mask": True}
    encodings = tokenizer(texts, truncation=False, **options)
    full_lengths = np.fromiter((len(ids) for ids in encodings["input_ids"]), dtype=np.int64, count=len(texts))
    too_long = full_lengths > max_length
    if policy == "error" and too_long.any():
        first = int(sentence_ids[np.argmax(too_long)])
        raise AlignmentError(
            f"sentence {first} has {int(full_lengths[np.argmax(too_long)])} tokens, more than model '{name}' takes "
            f"({max_length}) (extraction.max_length_policy: error); allowed policies: truncate, skip, error"
        )
    ids, masks, offsets = encodings["input_ids"], encodings["special_tokens_mask"], encodings["offset_mapping"]
    if too_long.any():  # re-encode only the over-long ones, letting the tokenizer keep its special tokens
        long = np.flatnonzero(too_long)
        cut = tokenizer([texts[i] for i in long], truncation=True, max_length=max_length, **options)
        ids, masks, offsets = list(ids), list(masks), list(offsets)
        for j, i in enumerate(long):
            ids[i], masks[i], offsets[i] = cut["input_ids"][j], cut["special_tokens_mask"][j], cut["offset_mapping"][j]
    return encodings, ids, masks, offsets, too_long


def _piece_words(
    texts: list[str],
    offsets_flat: np.ndarray,
    token_sentence: np.ndarray,
    words: pd.DataFrame,
    sentence_index: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For every piece: the global index (row of ``words``) of the word its first non-space character
    falls in, or -1; and the piece's first non-space character offset (global)."""
    text_lengths = np.fromiter((len(text) for text in texts), dtype=np.int64, count=len(texts))
    base = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(text_lengths + 1, out=base[1:])  # one separator between sentences
    codepoints = np.frombuffer("\n".join(texts).encode("utf-32-le"), dtype=np.uint32)
    n_chars = len(codepoints)
    positions = np.where(np.isin(codepoints, _SPACE_CODEPOINTS), n_chars, np.arange(n_chars))
    next_nonspace = np.append(np.minimum.accumulate(positions[::-1])[::-1], n_chars)
    begin = base[token_sentence] + offsets_flat[:, 0]
    end = base[token_sentence] + offsets_flat[:, 1]
    first = next_nonspace[np.minimum(begin, n_chars)]
    word_sentence = sentence_index
    word_start = base[word_sentence] + words["char_start"].to_numpy(dtype=np.int64)
    word_end = word_start + words["word"].str.len().to_numpy(dtype=np.int64)
    word = np.searchsorted(word_start, first, side="right") - 1
    safe = np.clip(word, 0, max(len(word_start) - 1, 0))
    inside = (
        (
            (word >= 0)
            & (first < end)
            & (len(word_start) > 0)
            & (first < word_end[safe])
            & (word_sentence[safe] == token_sentence)
        )
        if len(word_start)
        else np.zeros(len(first), dtype=bool)
    )
    return np.where(inside, word, -1), first


def plan_pieces(
    tokenizer,
    sentences: pd.DataFrame,
    words: pd.DataFrame,
    *,
    indexing: str,
    max_length: int,
    policy: str,
    name: str = "",
) -> Plan:
    """The plan of a Hugging Face model: its pieces of every sentence, aligned to spaCy words.

    ``sentences``: ``sentence_id``, ``text`` (corpus order); ``words``: the spaCy words of those
    sentences (``sentence_id``, ``position``, ``word``, ``char_start``, ``is_punct``), in corpus order.
    """
    with collection_paused():
        return _plan_pieces(
            tokenizer, sentences, words, indexing=indexing, max_length=max_length, policy=policy, name=name
        )


def _plan_pieces(tokenizer, sentences, words, *, indexing, max_length, policy, name) -> Plan:
    texts = sentences["text"].tolist()
    sentence_ids = sentences["sentence_id"].to_numpy(dtype=np.int64)
    if not texts:
        return _empty_plan()
    full, ids, masks, offsets, too_long = _encode(tokenizer, texts, max_length, policy, sentence_ids, name)
    skipped = too_long & (policy == "skip")
    truncated = too_long & ~skipped
    input_ids, token_offsets = _flat(ids)
    special = _flat(masks)[0].astype(bool)
    offsets_flat = _flat_pairs(offsets, len(input_ids))
    token_sentence = np.repeat(np.arange(len(texts)), np.diff(token_offsets))
    sentence_index = np.searchsorted(sentence_ids, words["sentence_id"].to_numpy(dtype=np.int64))
    word_of_piece, _ = _piece_words(texts, offsets_flat, token_sentence, words, sentence_index)
    word_of_piece[special | skipped[token_sentence]] = -1
    token_position = np.arange(len(input_ids)) - token_offsets[token_sentence]
    kept = np.flatnonzero(word_of_piece >= 0)
    word_positions = words["position"].to_numpy(dtype=np.int64)
    if indexing == "subword":
        pieces = np.asarray(tokenizer.convert_ids_to_tokens(input_ids[kept].tolist()), dtype=object)
        punct_of = {piece: is_punct(strip_marker(piece)) for piece in set(pieces.tolist())}
        units = pd.DataFrame(
            {
                "sentence_id": sentence_ids[token_sentence[kept]],
                "unit": pieces,
                "word_position": word_positions[word_of_piece[kept]],
                "is_punct": [punct_of[piece] for piece in pieces.tolist()],
                "token_first": token_position[kept],
                "token_last": token_position[kept],
            }
        )
        unit_sentence = token_sentence[kept]
        lost_pieces = _lost_pieces(tokenizer, full, ids, too_long, skipped)
    else:
        # a word's pieces are contiguous (offsets only grow): its first and last kept piece
        boundary = np.flatnonzero(np.diff(word_of_piece[kept]) != 0) + 1 if len(kept) else np.array([], dtype=np.int64)
        starts = np.concatenate([[0], boundary]) if len(kept) else np.array([], dtype=np.int64)
        ends = np.append(starts[1:], len(kept)) - 1 if len(kept) else np.array([], dtype=np.int64)
        word = word_of_piece[kept[starts]] if len(kept) else np.array([], dtype=np.int64)
        first, last = kept[starts], kept[ends]
        if np.any(last - first != ends - starts):
            raise AlignmentError("a word's pieces are not contiguous in the model's input; report this tokenizer")
        units = pd.DataFrame(
            {
                "sentence_id": sentence_ids[token_sentence[first]],
                "unit": words["word"].to_numpy()[word],
                "word_position": word_positions[word],
                "is_punct": words["is_punct"].to_numpy(dtype=bool)[word],
                "token_first": token_position[first],
                "token_last": token_position[last],
            }
        )
        unit_sentence = token_sentence[first]
        lost_pieces = []
    units, unit_offsets = _number_units(units, unit_sentence, len(texts))
    has_unit = np.zeros(len(words), dtype=bool)
    has_unit[np.unique(word_of_piece[kept])] = True
    lost = _lost_words(words, sentence_index, has_unit, truncated, skipped, word_of_piece, token_sentence)
    return Plan(sentence_ids, input_ids, token_offsets, truncated, skipped, units, unit_offsets, lost, lost_pieces)


def _lost_pieces(tokenizer, full, ids, too_long, skipped) -> list[tuple[str, str]]:
    """(piece, reason) of every non-special piece of the over-long sentences that is not stored."""
    lost = []
    for i in np.flatnonzero(too_long):
        pieces = [piece for piece, special in zip(full["input_ids"][i], full["special_tokens_mask"][i]) if not special]
        kept = 0 if skipped[i] else len(ids[i]) - len(full["input_ids"][i]) + len(pieces)
        reason = "skipped" if skipped[i] else "truncated"
        lost += [(piece, reason) for piece in tokenizer.convert_ids_to_tokens(pieces[max(kept, 0) :])]
    return lost


def _number_units(units: pd.DataFrame, unit_sentence: np.ndarray, n_sentences: int) -> tuple[pd.DataFrame, np.ndarray]:
    counts = (
        np.bincount(unit_sentence, minlength=n_sentences)
        if len(unit_sentence)
        else np.zeros(n_sentences, dtype=np.int64)
    )
    unit_offsets = np.zeros(n_sentences + 1, dtype=np.int64)
    np.cumsum(counts, out=unit_offsets[1:])
    units.insert(0, "row", np.arange(len(units), dtype=np.int64))
    units.insert(2, "position", (np.arange(len(units)) - unit_offsets[unit_sentence]).astype(np.int32))
    units = units.astype(
        {
            "sentence_id": "int64",
            "word_position": "int32",
            "is_punct": bool,
            "token_first": "int32",
            "token_last": "int32",
        }
    )
    return units[UNIT_COLUMNS], unit_offsets


def _lost_words(words, sentence_index, has_unit, truncated, skipped, word_of_piece, token_sentence) -> pd.DataFrame:
    """Words with no unit, and why: their sentence was skipped, cut before them, or a piece spans them."""
    missing = ~has_unit
    if not missing.any():
        return pd.DataFrame(
            {
                "sentence_id": pd.Series(dtype="int64"),
                "position": pd.Series(dtype="int32"),
                "reason": pd.Series(dtype="str"),
            }
        )
    # the last word that received a piece, per sentence: words after it in a truncated sentence were cut off
    last_word = np.full(len(truncated), -1, dtype=np.int64)
    assigned = word_of_piece >= 0
    np.maximum.at(last_word, token_sentence[assigned], word_of_piece[assigned])
    index = np.flatnonzero(missing)
    sentence = sentence_index[index]
    reason = np.where(
        skipped[sentence],
        "skipped",
        np.where(truncated[sentence] & (index > last_word[sentence]), "truncated", "spanning"),
    )
    return pd.DataFrame(
        {
            "sentence_id": words["sentence_id"].to_numpy(dtype=np.int64)[index],
            "position": words["position"].to_numpy(dtype=np.int32)[index],
            "reason": reason,
        }
    )


def plan_words(sentences: pd.DataFrame, words: pd.DataFrame, *, max_length: int | None = None) -> Plan:
    """The plan of a model that reads spaCy words (ELMo): one unit per word, one 'token' per word."""
    sentence_ids = sentences["sentence_id"].to_numpy(dtype=np.int64)
    sentence_index = np.searchsorted(sentence_ids, words["sentence_id"].to_numpy(dtype=np.int64))
    positions = words["position"].to_numpy(dtype=np.int64)
    units = pd.DataFrame(
        {
            "sentence_id": words["sentence_id"].to_numpy(dtype=np.int64),
            "unit": words["word"].to_numpy(),
            "word_position": positions,
            "is_punct": words["is_punct"].to_numpy(dtype=bool),
            "token_first": positions,
            "token_last": positions,
        }
    )
    units, unit_offsets = _number_units(units, sentence_index, len(sentence_ids))
    none = np.zeros(len(sentence_ids), dtype=bool)
    return Plan(sentence_ids, np.zeros(0, dtype=np.int64), unit_offsets.copy(), none, none.copy(), units, unit_offsets)


def plan_faithful(
    tokenizer,
    sentences: pd.DataFrame,
    words: pd.DataFrame,
    *,
    max_length: int,
    policy: str,
    name: str = "",
) -> Plan:
    """The paper's GPT-2 input (``tokenization: faithful``): spaCy tokens looked up bare, word i read at position i.

    Every spaCy word, punctuation included, is fed (the paper's code fed them all) and is a unit
    whose row is the model's vector at token position i, the word's own spaCy position: misaligned
    after a word that took several pieces, as the paper read it.
    """
    from contextuality.extraction.faithful import faithful_gpt2_input

    sentence_ids = sentences["sentence_id"].to_numpy(dtype=np.int64)
    vocab = tokenizer.get_vocab()
    grouped = words.groupby("sentence_id", sort=False)["word"].apply(list)
    ids, truncated, skipped, n_misaligned = [], np.zeros(len(sentence_ids), bool), np.zeros(len(sentence_ids), bool), 0
    for i, sentence_id in enumerate(sentence_ids.tolist()):
        tokens = grouped.get(sentence_id, [])
        built = faithful_gpt2_input(tokens, tokenizer, vocab=vocab) if tokens else None
        sentence = list(built.input_ids) if built is not None else []
        n_misaligned += built.n_misaligned if built is not None else 0
        if len(sentence) > max_length:
            if policy == "error":
                raise AlignmentError(
                    f"sentence {sentence_id} has {len(sentence)} tokens, more than model '{name}' takes ({max_length}) "
                    "(extraction.max_length_policy: error); allowed policies: truncate, skip, error"
                )
            truncated[i], skipped[i] = policy == "truncate", policy == "skip"
            sentence = [] if policy == "skip" else sentence[:max_length]
        ids.append(sentence)
    input_ids, token_offsets = _flat(ids)
    lengths = np.diff(token_offsets)
    sentence_index = np.searchsorted(sentence_ids, words["sentence_id"].to_numpy(dtype=np.int64))
    positions = words["position"].to_numpy(dtype=np.int64)
    stored = positions < lengths[sentence_index]  # word i reads position i: only within what was fed
    units = pd.DataFrame(
        {
            "sentence_id": words["sentence_id"].to_numpy(dtype=np.int64)[stored],
            "unit": words["word"].to_numpy()[stored],
            "word_position": positions[stored],
            "is_punct": words["is_punct"].to_numpy(dtype=bool)[stored],
            "token_first": positions[stored],
            "token_last": positions[stored],
        }
    )
    units, unit_offsets = _number_units(units, sentence_index[stored], len(sentence_ids))
    index = np.flatnonzero(~stored)
    lost = pd.DataFrame(
        {
            "sentence_id": words["sentence_id"].to_numpy(dtype=np.int64)[index],
            "position": words["position"].to_numpy(dtype=np.int32)[index],
            "reason": np.where(skipped[sentence_index[index]], "skipped", "truncated"),
        }
    )
    log.info(
        "faithful GPT-2 input: %d words read a position that belongs to another word (the paper's misalignment)",
        n_misaligned,
    )
    return Plan(sentence_ids, input_ids, token_offsets, truncated, skipped, units, unit_offsets, lost, [], n_misaligned)


def _empty_plan() -> Plan:
    empty = np.zeros(0, dtype=np.int64)
    units = pd.DataFrame(
        {
            column: pd.Series(dtype=dtype)
            for column, dtype in zip(
                UNIT_COLUMNS, ["int64", "int64", "int32", "str", "int32", "bool", "int32", "int32"]
            )
        }
    )
    return Plan(
        empty,
        empty,
        np.zeros(1, dtype=np.int64),
        empty.astype(bool),
        empty.astype(bool),
        units,
        np.zeros(1, dtype=np.int64),
    )
