"""GPT-2 input exactly as the paper's code built it, misalignment included.

The paper's ``preprocess.GPT2.vectorize`` (kawine/contextual, pytorch_pretrained's ``GPT2Tokenizer``)
fed GPT-2, for each spaCy token t of a sentence:

1. t's own vocabulary id, if ``convert_tokens_to_ids(t)`` was not 0 (0 meant "unknown", but it is
   also the id of "!", so "!" fell through);
2. else the id of 'Ġ' + t, if that was not 0;
3. else the ids of ``tokenizer.tokenize(t)``: t's byte-level BPE pieces (no leading space), all of them.

No BOS or ``<|endoftext|>`` was added. Most words therefore went in without their space marker, as if
the sentence had no spaces (8.5). Its index (``word2sent.json``) held spaCy positions, and
``analyze.py`` read ``f[sentence][layer, spacy_position]``: after a word that took several pieces
(case 3), every later word of the sentence read the vector of some earlier piece (8.4).

Lookups are raw string lookups in the vocabulary, as ``encoder.get(t, 0)`` was: a token with
non-ASCII characters is looked up as it is written, not byte-encoded (so it usually falls to case 3,
and a string that happens to equal a byte-level vocabulary entry is taken as that entry, as it was).

The paper's reads never went past the end of a sequence: every spaCy token gives at least one id, so
the word at spaCy position i always reads a position i <= (its own first piece) < sequence length; an
IndexError was impossible and the misread rows are earlier pieces of the same sentence. Two behaviours
of the paper's code are not reproduced: (a) a sentence of exactly one id came out of
``torch.stack(...).squeeze()`` without its token axis, so ``[layer, 0]`` read a scalar (MEV skipped
it through its ``shape != ()`` test; self-similarity would have failed on it): here its position 0
is the real vector; (b) a sequence longer than GPT-2's 1,024 positions would have failed in the
model: here the caller decides (none of the STS sentences comes near it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from contextuality.models.kind import is_decoder

SPACE_MARKER = "Ġ"
# Vocabulary entries the paper's code took for unknown: GPT-2's id 0, which is "!".
PAPER_UNKNOWN = ("!",)


class FaithfulInput(NamedTuple):
    """One sentence's model input as the paper built it, and where its code read each word."""

    input_ids: list[int]
    tokens: list[str]  # the vocabulary strings of input_ids (for inspection)
    positions: list[int]  # per spaCy word: the input position the paper's code read (the word's index)
    word_spans: list[tuple[int, int]]  # per spaCy word: [start, end) of its own pieces in input_ids
    n_misaligned: int  # words whose read position lies outside their own pieces


def faithful_gpt2_input(
    words: Sequence[str],
    tokenizer,
    *,
    vocab: Mapping[str, int] | None = None,
    unknown: Collection[str] = PAPER_UNKNOWN,
) -> FaithfulInput:
    """The paper's GPT-2 input for one sentence's spaCy tokens ``words`` (see the module docstring).

    ``tokenizer`` is a GPT-2-style byte-level BPE ``PreTrainedTokenizerFast`` whose ``tokenize`` adds no
    prefix space (as GPT-2's does not by default); membership is tested in ``vocab`` (default
    ``tokenizer.get_vocab()``; pass it once for many sentences, building it costs milliseconds). The
    entries in ``unknown`` are treated as absent from the vocabulary, as the old tokenizer's id 0 was.

    ``positions[i]`` is i: the paper's code read input position i for the word at spaCy position i.
    ``word_spans[i]`` are the positions of the word's own pieces, for a corrected variant (first piece
    ``start``, last piece ``end - 1``). A word is misaligned when ``positions[i]`` lies outside its span,
    that is, when an earlier word of the sentence took more than one piece.
    """
    vocab = tokenizer.get_vocab() if vocab is None else vocab
    input_ids: list[int] = []
    word_spans: list[tuple[int, int]] = []
    prefix_checked = False
    for word in words:
        start = len(input_ids)
        if word in vocab and word not in unknown:
            input_ids.append(vocab[word])
        elif SPACE_MARKER + word in vocab and SPACE_MARKER + word not in unknown:
            input_ids.append(vocab[SPACE_MARKER + word])
        else:
            if not prefix_checked:
                _refuse_prefix_space(tokenizer)
                prefix_checked = True
            pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
            if not pieces:
                raise ValueError(f"word {word!r} gives no tokens; the paper's code never met one")
            input_ids.extend(pieces)
        word_spans.append((start, len(input_ids)))
    positions = list(range(len(words)))
    n_misaligned = sum(not (start <= position < end) for position, (start, end) in zip(positions, word_spans))
    return FaithfulInput(input_ids, tokenizer.convert_ids_to_tokens(input_ids), positions, word_spans, n_misaligned)


class NotADecoderError(ValueError):
    """``tokenization: faithful`` asked of an encoder; the message names the key and what to use."""


def encoder_problem(key: str, model_type: str | None) -> str | None:
    """The one line refusing ``tokenization: faithful`` for model ``key`` of ``model_type``, or None for a decoder.

    The paper's input has no [CLS]/[SEP] and reads word i at position i: on an encoder it would feed
    the model text it never saw without its special tokens, and store other words' vectors.
    """
    if is_decoder(model_type):
        return None
    return (
        f"models.{key}.tokenization: 'faithful' rebuilds the paper's GPT-2 input, which only a decoder reads, but "
        f"'{key}' is a {model_type!r} model, not a decoder (no [CLS]/[SEP], word i read at position i); "
        "use tokenization: natural"
    )


def refuse_encoder(key: str, model_type: str | None) -> None:
    """Raise NotADecoderError for ``tokenization: faithful`` on a model that is not a decoder."""
    problem = encoder_problem(key, model_type)
    if problem:
        raise NotADecoderError(problem)


def _refuse_prefix_space(tokenizer) -> None:
    """The paper's fallback split a word with no space before it; a tokenizer adding one would differ."""
    if tokenizer.tokenize("a")[0].startswith(SPACE_MARKER):
        raise ValueError(
            "tokenizer adds a prefix space (add_prefix_space=True); the paper's GPT2Tokenizer.tokenize did not: "
            "load it with add_prefix_space=False"
        )
