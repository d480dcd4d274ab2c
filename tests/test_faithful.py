"""The paper's GPT-2 input and misaligned reads, on byte-level BPE tokenizers built here."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from contextuality.extraction.faithful import faithful_gpt2_input


def byte_alphabet() -> list[str]:
    """GPT-2's 256 byte characters in its vocabulary order (so "!" has id 0, as in GPT-2)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + i) for i in range(len(others))]


def byte_level(model, add_prefix_space: bool = False) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


@pytest.fixture(scope="module")
def hand_built() -> PreTrainedTokenizerFast:
    """Every byte, plus: "the" and "cat" bare and with Ġ, "dog" only as "Ġdog", "Ġ!", and the merges
    z+e and b+r, br+a (so "zebra" is two pieces, "ze" "bra")."""
    vocab = {char: i for i, char in enumerate(byte_alphabet())}
    for entry in ["ze", "br", "bra", "Ġ!", "the", "Ġthe", "cat", "Ġcat", "Ġdog", "<|endoftext|>"]:
        vocab[entry] = len(vocab)
    return byte_level(models.BPE(vocab, [("z", "e"), ("b", "r"), ("br", "a"), ("Ġ", "!")]))


def test_each_case_of_the_paper_lookup(hand_built):
    vocab = hand_built.get_vocab()
    assert vocab["!"] == 0
    words = ["the", "dog", "zebra", "!", "cat", "é", "café", "."]
    got = faithful_gpt2_input(words, hand_built)
    assert got.tokens == [
        "the",  # bare entry: no space marker, as the paper fed most words
        "Ġdog",  # no bare "dog": 'Ġ' + t
        "ze", "bra",  # in neither form: its BPE pieces, all of them, the first without Ġ
        "Ġ!",  # "!" is id 0, which the old tokenizer meant as unknown: it falls through to "Ġ!"
        "cat",
        "é",  # a raw lookup: "é" is the byte-level character of byte 0xE9, so it goes in as that byte
        "c", "a", "f", "Ã", "©",  # not in the vocabulary raw: its UTF-8 bytes as pieces
        ".",
    ]  # fmt: skip
    assert got.input_ids == [vocab[token] for token in got.tokens]
    assert vocab["<|endoftext|>"] not in got.input_ids  # no BOS / end-of-text
    assert got.positions == list(range(len(words)))
    assert got.word_spans == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 6), (6, 7), (7, 12), (12, 13)]
    # "zebra" itself reads its first piece; every word after it reads an earlier piece
    assert got.n_misaligned == 5
    read = [got.tokens[position] for position in got.positions]
    assert read == ["the", "Ġdog", "ze", "bra", "Ġ!", "cat", "é", "c"]


def test_no_misalignment_without_multi_piece_words(hand_built):
    got = faithful_gpt2_input(["the", "cat", "!", "dog", "zebra"], hand_built)
    assert got.tokens == ["the", "cat", "Ġ!", "Ġdog", "ze", "bra"]
    assert got.n_misaligned == 0  # a multi-piece word at the end misaligns nothing
    assert all(start <= position < end for position, (start, end) in zip(got.positions, got.word_spans))


def test_reads_never_pass_the_end_of_the_sequence(hand_built):
    words = ["hippopotamus", "zebra", "café", "x"]
    got = faithful_gpt2_input(words, hand_built)
    assert len(got.input_ids) == 12 + 2 + 5 + 1
    assert max(got.positions) < len(got.input_ids)
    assert got.n_misaligned == 3
    assert faithful_gpt2_input([], hand_built) == ([], [], [], [], 0)


def test_unknown_entries_and_a_given_vocabulary(hand_built):
    vocab = hand_built.get_vocab()
    assert faithful_gpt2_input(["!"], hand_built, unknown=()).tokens == ["!"]
    assert faithful_gpt2_input(["the"], hand_built, unknown=("the",)).tokens == ["Ġthe"]
    assert faithful_gpt2_input(["dog", "!"], hand_built, vocab=vocab).input_ids == [vocab["Ġdog"], vocab["Ġ!"]]


def test_whitespace_token(hand_built):
    """spaCy keeps extra spaces as tokens; the paper's tokenize gave them the space byte 'Ġ'."""
    assert faithful_gpt2_input(["the", " ", "cat"], hand_built).tokens == ["the", "Ġ", "cat"]


def test_a_tokenizer_adding_a_prefix_space_is_refused(hand_built):
    vocab = hand_built.get_vocab()
    prefixed = byte_level(models.BPE({k: v for k, v in vocab.items() if k != "<|endoftext|>"}, [("z", "e")]), True)
    assert faithful_gpt2_input(["the", "dog"], prefixed).tokens == ["the", "Ġdog"]  # no BPE fallback needed
    with pytest.raises(ValueError, match="prefix space"):
        faithful_gpt2_input(["zebra"], prefixed)


def test_trained_tokenizer_pieces_decode_to_their_words():
    """A byte-level BPE trained here: every word's span decodes to the word, with or without a leading
    space, and the misalignment count is the number of words after the first multi-piece word."""
    corpus = ["the cat sat on the mat .", "a dog sat on the log !", "the dog and the cat ran ."] * 40
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet, show_progress=False)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    vocab = hf.get_vocab()
    assert "the" in vocab and "Ġcat" in vocab and "zebra" not in vocab and "Ġzebra" not in vocab
    sentences = [["the", "cat", "sat", "."], ["zebras", "ran", "on", "the", "mat"], ["a", "dog", "!", "unseen", "log"]]
    for words in sentences:
        got = faithful_gpt2_input(words, hf, vocab=vocab)
        multi = [len(range(*span)) > 1 for span in got.word_spans]
        for word, (start, end) in zip(words, got.word_spans):
            assert hf.decode(got.input_ids[start:end]).lstrip(" ") == word
            if end - start == 1:
                assert got.tokens[start] in (word, "Ġ" + word)
        first_multi = multi.index(True) if any(multi) else len(words)
        assert got.n_misaligned == max(0, len(words) - first_multi - 1)
