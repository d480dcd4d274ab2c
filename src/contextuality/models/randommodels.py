"""Smoke-test models: a tiny randomly initialised BERT or GPT-2 with a real tokenizer learnt from the corpus.

The vocabularies are learnt in a fixed order (ties between equally frequent pairs broken by their text),
so two builds with the same seed and corpus give byte-identical files in any process.
"""

from __future__ import annotations

from pathlib import Path


def learn_bpe_merges(
    word_counts: dict[str, int], initial: list[str], vocab_size: int, *, split, join
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Greedy BPE merges learnt deterministically: the most frequent pair first, ties by the pair's text.

    The ``tokenizers`` trainers break ties between equally frequent pairs in hash order, which Rust
    seeds at random in every process, so two trainings on the same text gave different vocabularies.
    Here every order is fixed (words sorted, pairs compared by count then by their strings), so the
    same text always gives the same vocabulary. ``word_counts``: pre-tokenized word -> count;
    ``initial``: the first tokens (special tokens, alphabet), in id order; ``split(word)``: a word's
    initial symbols; ``join(a, b)``: the token merging two symbols. Merging stops when the vocabulary
    reaches ``vocab_size`` or no pair is left. Returns (token -> id, merges in order).
    """
    import heapq
    from collections import defaultdict

    vocab: dict[str, int] = {}
    for token in initial:
        vocab.setdefault(token, len(vocab))
    words = sorted(word_counts)
    counts = [word_counts[word] for word in words]
    symbols = [split(word) for word in words]
    for token in sorted({symbol for word in symbols for symbol in word} - vocab.keys()):
        vocab[token] = len(vocab)

    pair_counts: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, word in enumerate(symbols):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    heap = [(-count, a, b) for (a, b), count in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and heap:
        negative, a, b = heapq.heappop(heap)
        if pair_counts.get((a, b), 0) != -negative:
            continue  # an outdated entry: this pair's count changed and was pushed again
        new = join(a, b)
        merges.append((a, b))
        vocab.setdefault(new, len(vocab))
        changed = set()
        for i in sorted(where.pop((a, b), ())):
            word, merged, j = symbols[i], [], 0
            while j < len(word):
                if j + 1 < len(word) and word[j] == a and word[j + 1] == b:
                    merged.append(new)
                    j += 2
                else:
                    merged.append(word[j])
                    j += 1
            if len(merged) == len(word):
                continue  # the pair left this word in an earlier merge
            for pair in zip(word, word[1:]):
                pair_counts[pair] -= counts[i]
                changed.add(pair)
            for pair in zip(merged, merged[1:]):
                pair_counts[pair] += counts[i]
                where[pair].add(i)
                changed.add(pair)
            symbols[i] = merged
        pair_counts.pop((a, b), None)
        for pair in sorted(changed - {(a, b)}):
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], *pair))
            else:
                pair_counts.pop(pair, None)
    return vocab, merges


def train_corpus_tokenizer(texts: list[str], architecture: str, vocab_size: int = 2000):
    """A real WordPiece (BERT) or byte-level BPE (GPT-2) tokenizer trained on ``texts``, deterministically.

    The vocabulary is learnt by ``learn_bpe_merges`` (as the ``tokenizers`` trainers do, WordPiece's by
    BPE merges with ``##`` marking a word's inner pieces) and the ``tokenizers`` model is built from it,
    so the same texts give byte-identical tokenizer files in every process.
    """
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast, GPT2TokenizerFast

    def word_counts(normalizer, pre_tokenizer) -> Counter:
        counted: Counter = Counter()
        for text in texts:
            text = normalizer.normalize_str(text) if normalizer else text
            counted.update(word for word, _ in pre_tokenizer.pre_tokenize_str(text))
        return counted

    if architecture == "bert":
        normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=False), pre_tokenizers.BertPreTokenizer()
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        counted = word_counts(normalizer, pre_tokenizer)
        alphabet = sorted({char for word in counted for char in word})
        vocab, _ = learn_bpe_merges(
            counted,
            specials + alphabet,
            vocab_size,
            split=lambda word: [word[0]] + [f"##{char}" for char in word[1:]],
            join=lambda a, b: a + b.removeprefix("##"),
        )
        tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        tokenizer.normalizer = normalizer
        tokenizer.pre_tokenizer = pre_tokenizer
        tokenizer.add_special_tokens(specials)
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
        )
        tokenizer.decoder = decoders.WordPiece()
        return BertTokenizerFast(tokenizer_object=tokenizer, do_lower_case=False)
    pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    special = "<|endoftext|>"
    vocab, merges = learn_bpe_merges(
        word_counts(None, pre_tokenizer),
        [special, *sorted(pre_tokenizers.ByteLevel.alphabet())],
        vocab_size,
        split=list,
        join=lambda a, b: a + b,
    )
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([special])
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, eos_token=special, bos_token=special)
    fast.pad_token = fast.eos_token
    return fast


HEADS = ("masked-lm",)


def build_random_model(
    architecture: str,
    texts: list[str],
    out_dir: Path,
    seed: int,
    *,
    n_hidden_layers: int,
    hidden_size: int,
    vocab_size: int,
    head: str | None = None,
) -> None:
    """A tiny randomly initialised BERT or GPT-2 (seeded) with a tokenizer trained on the corpus.

    ``head="masked-lm"`` (BERT only) also saves a random masked-LM head: the weights are a
    ``BertForPreTraining`` (``bert.*``, pooler included, plus ``cls.*``), whose ``bert.*`` tensors are
    exactly those of the head-less build with the same seed (copied from it), so hidden states do not change.
    The GPT-2 needs no head option: its output layer is tied to the input embeddings.
    """
    import torch
    from transformers import BertConfig, BertForPreTraining, BertModel, GPT2Config, GPT2Model

    if head is not None and (head not in HEADS or architecture != "bert"):
        raise ValueError(
            f"random model head {head!r} for architecture {architecture!r}: only head='masked-lm' with "
            "architecture 'bert' is allowed (a GPT-2's output layer is its tied embeddings); drop the option"
        )
    torch.manual_seed(seed)
    tokenizer = train_corpus_tokenizer(texts, architecture, vocab_size)
    layers, hidden = n_hidden_layers, hidden_size
    if architecture == "bert":
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=2,
            intermediate_size=hidden * 2,
            max_position_embeddings=128,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = BertModel(config)
        if head == "masked-lm":
            # built after the base model, so the base draws the same random numbers as without a head
            with_head = BertForPreTraining(config)
            with_head.bert.load_state_dict(model.state_dict())
            model = with_head
    else:
        config = GPT2Config(vocab_size=len(tokenizer), n_embd=hidden, n_layer=layers, n_head=2, n_positions=128)
        model = GPT2Model(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
