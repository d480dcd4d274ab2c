"""The plan: pieces aligned to spaCy words with array operations equal a token-by-token alignment, and what
cannot be stored (truncation, skipping, pieces spanning words) is counted, never dropped silently."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import materialise
from contextuality.corpus.words import word_index, word_table
from contextuality.extraction import alignment
from contextuality.extraction.plan import build_occurrences, count_losses, loss_warning
from contextuality.models import loading

SENTENCES = [
    "The unbelievably quick dog jumps.",
    "A dog, a cat and an extraordinarily sleepy hippopotamus!",
    "",
    "Dogs don't sleep in the afternoon, do they?",
    "  Leading spaces and  double  spaces.",
    "Naïve café owners wont cannot go.",
]


def reference_alignment(tokenizer, texts, words, indexing):
    """The token-by-token loop the vectorised alignment replaced (one piece at a time, in Python)."""
    units = []
    for sentence_id, text in enumerate(texts):
        group = words[words["sentence_id"] == sentence_id]
        starts, ends = group["char_start"].tolist(), [s + len(w) for s, w in zip(group["char_start"], group["word"])]
        encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        piece_word = []
        for (begin, end), special in zip(encoding["offset_mapping"], encoding["special_tokens_mask"]):
            while begin < end and text[begin].isspace():
                begin += 1
            word = int(np.searchsorted(starts, begin, side="right")) - 1 if starts else -1
            piece_word.append(word if not special and begin < end and 0 <= word and begin < ends[word] else -1)
        tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
        if indexing == "subword":
            units += [
                (sentence_id, tokens[i], int(group["position"].iloc[w]), i, i)
                for i, w in enumerate(piece_word)
                if w >= 0
            ]
        else:
            for w in sorted(set(piece_word) - {-1}):
                pieces = [i for i, x in enumerate(piece_word) if x == w]
                units.append(
                    (sentence_id, group["word"].iloc[w], int(group["position"].iloc[w]), pieces[0], pieces[-1])
                )
    return pd.DataFrame(units, columns=["sentence_id", "unit", "word_position", "token_first", "token_last"])


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def tokenizer(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"tok-{request.param}")
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    sentences.to_parquet(folder / "sentences.parquet")
    spec = {
        "source": "random",
        "architecture": request.param,
        "n_hidden_layers": 1,
        "hidden_size": 16,
        "vocab_size": 120 if request.param == "bert" else 300,
    }
    record = materialise("m", spec, folder, sentences_parquet=folder / "sentences.parquet", seed=3)
    return loading.load_tokenizer(record, folder / "model", None)[0]


@pytest.mark.parametrize("indexing", ["subword", "word"])
def test_vectorised_alignment_equals_the_token_by_token_loop(tokenizer, indexing):
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    words = word_table(sentences)
    plan = alignment.plan_pieces(tokenizer, sentences, words, indexing=indexing, max_length=512, policy="truncate")
    want = reference_alignment(tokenizer, SENTENCES, words, indexing)
    got = plan.units[want.columns].astype({"word_position": "int64", "token_first": "int64", "token_last": "int64"})
    if indexing == "word":  # a pure-space piece (byte-level BPE's lone 'Ġ') belongs to no word: the loop gave it
        got, want = got.drop(columns="token_first"), want.drop(columns="token_first")  # to the next word's first piece
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)
    assert plan.units["row"].tolist() == list(range(len(plan.units)))
    assert np.array_equal(
        np.diff(plan.unit_offsets),
        plan.units.groupby("sentence_id").size().reindex(range(len(SENTENCES)), fill_value=0),
    )


class PieceTokenizer:
    """A fast-tokenizer stand-in with given pieces per sentence: [CLS] pieces [SEP], offsets from the text."""

    def __init__(self, pieces: dict[str, list[str]]):
        self.pieces = pieces
        self.vocab = {"[CLS]": 0, "[SEP]": 1}
        for sentence in pieces.values():
            for piece in sentence:
                self.vocab.setdefault(piece, len(self.vocab))
        self.inverse = {i: piece for piece, i in self.vocab.items()}

    def __call__(self, texts, truncation=False, max_length=None, **_):
        out = {"input_ids": [], "offset_mapping": [], "special_tokens_mask": []}
        for text in texts:
            ids, offsets, cursor = [0], [(0, 0)], 0
            for piece in self.pieces[text]:
                begin = text.index(piece, cursor)
                ids.append(self.vocab[piece])
                offsets.append((begin, begin + len(piece)))
                cursor = begin + len(piece)
            ids, offsets = ids + [1], offsets + [(0, 0)]
            if truncation and len(ids) > max_length:
                ids, offsets = ids[: max_length - 1] + [1], offsets[: max_length - 1] + [(0, 0)]
            out["input_ids"].append(ids)
            out["offset_mapping"].append(offsets)
            out["special_tokens_mask"].append([1] + [0] * (len(ids) - 2) + [1])
        return out

    def convert_ids_to_tokens(self, ids):
        return [self.inverse[int(i)] for i in ids]


def test_a_piece_spanning_two_words_is_counted_as_a_loss_not_dropped_silently():
    texts = ["I cannot go.", "I cannot go now, cannot I?", "It is a very long sentence indeed."]
    sentences = pd.DataFrame({"sentence_id": range(3), "text": texts})
    words = word_table(sentences)
    assert words[words["sentence_id"] == 0]["word"].tolist() == ["I", "can", "not", "go", "."]  # spaCy splits it
    tokenizer = PieceTokenizer(
        {
            texts[0]: ["I", "cannot", "go", "."],  # one piece spans spaCy's "can" and "not"
            texts[1]: ["I", "cannot", "go", "now", ",", "cannot", "I", "?"],
            texts[2]: ["It", "is", "a", "very", "long", "sentence", "indeed", "."],
        }
    )
    plan = alignment.plan_pieces(tokenizer, sentences, words, indexing="word", max_length=6, policy="truncate")
    lost = plan.lost.sort_values(["sentence_id", "position"]).reset_index(drop=True)
    spanning = lost[lost["reason"] == "spanning"]
    assert list(zip(spanning["sentence_id"], spanning["position"])) == [(0, 2), (1, 2)]  # "not" after "can"
    truncated = lost[lost["reason"] == "truncated"]  # 6 tokens: [CLS] + 4 pieces + [SEP]
    assert list(zip(truncated["sentence_id"], truncated["position"])) == [
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 8),
        (1, 9),
        (2, 4),
        (2, 5),
        (2, 6),
        (2, 7),
    ]
    assert plan.truncated.tolist() == [False, True, True]
    index = word_index(words, sentences, min_occurrences=1, count="occurrences")
    occurrences = build_occurrences(plan.units, index, "word", 1, "occurrences", sentences)
    losses = count_losses(plan, index, occurrences, "word")
    assert losses["sentences_truncated"] == 2 and losses["sentences_skipped"] == 0
    # punctuation is not indexed: "can not I" of sentence 1 and "long sentence indeed" of sentence 2
    assert losses["indexed_occurrences_lost"] == {"truncated": 6, "skipped": 0, "spanning": 2}
    assert losses["indexed_occurrences"] == len(index)
    warning = loss_warning("m", losses)
    assert warning.startswith("WARNING model m: 2 sentences truncated; 0 skipped; 8 of ")
    assert "indexed occurrences lost (42.1%: 6 truncated, 0 skipped, 2 spanning)" in warning
    skipped = alignment.plan_pieces(tokenizer, sentences, words, indexing="word", max_length=6, policy="skip")
    skipped_losses = count_losses(
        skipped, index, build_occurrences(skipped.units, index, "word", 1, "occurrences", sentences), "word"
    )
    assert skipped_losses["sentences_skipped"] == 2 and skipped_losses["indexed_occurrences_lost"]["skipped"] == 8 + 7


def test_subword_truncation_counts_the_indexed_pieces_cut_off():
    texts = ["dog dog cat", "dog cat dog cat dog"]
    sentences = pd.DataFrame({"sentence_id": range(2), "text": texts})
    words = word_table(sentences)
    tokenizer = PieceTokenizer({texts[0]: ["dog", "dog", "cat"], texts[1]: ["dog", "cat", "dog", "cat", "dog"]})
    plan = alignment.plan_pieces(
        tokenizer, sentences, words, indexing="subword", max_length=4, policy="truncate"
    )  # 2 pieces kept
    occurrences = build_occurrences(plan.units, None, "subword", 2, "occurrences", sentences)
    losses = count_losses(plan, word_index(words, sentences, 1, "occurrences"), occurrences, "subword")
    # only "dog" keeps enough occurrences to be indexed: the two cut off in sentence 1 count
    assert set(occurrences["word"]) == {"dog"}
    assert losses["indexed_occurrences_lost"]["truncated"] == 2
    assert losses["indexed_occurrences"] == len(occurrences) + 2


def test_nothing_lost_gives_no_warning():
    sentences = pd.DataFrame({"sentence_id": [0], "text": ["dog cat"]})
    words = word_table(sentences)
    plan = alignment.plan_pieces(
        PieceTokenizer({"dog cat": ["dog", "cat"]}), sentences, words, indexing="word", max_length=8, policy="truncate"
    )
    index = word_index(words, sentences, 1, "occurrences")
    assert (
        loss_warning(
            "m",
            count_losses(
                plan, index, build_occurrences(plan.units, index, "word", 1, "occurrences", sentences), "word"
            ),
        )
        is None
    )


def test_a_shard_plan_is_a_slice_of_the_model_plan(tokenizer):
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    words = word_table(sentences)
    plan = alignment.plan_pieces(tokenizer, sentences, words, indexing="word", max_length=512, policy="truncate")
    part = plan.slice(2, 5)
    assert part.first_row == plan.unit_offsets[2] and part.unit_offsets[0] == 0
    assert part.units["row"].tolist() == list(range(plan.unit_offsets[2], plan.unit_offsets[5]))
    np.testing.assert_array_equal(part.input_ids, plan.input_ids[plan.token_offsets[2] : plan.token_offsets[5]])


def test_plan_round_trips_through_its_files(tokenizer, tmp_path):
    from contextuality.extraction.plan import read_plan, write_plan

    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    plan = alignment.plan_pieces(
        tokenizer, sentences, word_table(sentences), indexing="subword", max_length=512, policy="truncate"
    )
    write_plan(plan, tmp_path / "tokens.parquet", tmp_path / "units.parquet")
    for first, last in ((0, len(SENTENCES)), (1, 4), (3, 3)):
        read, want = (
            read_plan(tmp_path / "tokens.parquet", tmp_path / "units.parquet", first, last),
            plan.slice(first, last),
        )
        np.testing.assert_array_equal(read.input_ids, want.input_ids)
        np.testing.assert_array_equal(read.token_offsets, want.token_offsets)
        np.testing.assert_array_equal(read.unit_offsets, want.unit_offsets)
        assert read.first_row == want.first_row
        pd.testing.assert_frame_equal(read.units.reset_index(drop=True), want.units.reset_index(drop=True))
