"""Extraction: stored vectors equal a direct forward pass, alignment is right, shards gather exactly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from conftest import extract_planned, gather_layers, load_model, materialise
from contextuality.corpus.words import word_index, word_table
from contextuality.extraction import extract, windows
from contextuality.extraction.alignment import plan_words
from contextuality.extraction.encoders import ElmoEncoder, encoder_for
from contextuality.extraction.extract import shard_bounds
from contextuality.extraction.finite import NonFiniteError
from contextuality.extraction.plan import build_occurrences
from contextuality.store.export import export_classic
from contextuality.store.files import open_complete

SENTENCES = [
    "The unbelievably quick dog jumps.",
    "A dog, a cat and an extraordinarily sleepy hippopotamus!",
    "The dog sleeps.",
    "Dogs don't sleep in the afternoon, do they?",
    "",
    "The cat sleeps on the mat near the dog.",
    "A hippopotamus is not a dog.",
    "Quick quick quick.",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[pd.DataFrame, pd.DataFrame, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    sentences = pd.DataFrame({"sentence_id": range(len(SENTENCES)), "text": SENTENCES})
    sentences.to_parquet(folder / "sentences.parquet")
    return sentences, word_table(sentences), folder / "sentences.parquet"


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def tiny_model(request, corpus, tmp_path_factory):
    """A tiny randomly initialised model, materialised through the real 'random' source."""
    _, _, sentences_path = corpus
    folder = tmp_path_factory.mktemp(f"model-{request.param}")
    # a small vocabulary, so that long words are split into several pieces
    vocab_size = 120 if request.param == "bert" else 300
    spec = {
        "source": "random",
        "architecture": request.param,
        "n_hidden_layers": 2,
        "hidden_size": 32,
        "vocab_size": vocab_size,
    }
    record = materialise(request.param, spec, folder, sentences_parquet=sentences_path, seed=3)
    return load_model(record, folder / "model", spec), spec


def _extract(loaded, sentences, words, out_dir: Path, indexing="subword", pooling="first", batch_size=3, **kw):
    return extract_planned(
        loaded, sentences, words, out_dir, indexing=indexing, pooling=pooling, batch_size=batch_size, **kw
    )[1]


def _direct_hidden(loaded, text: str) -> tuple[np.ndarray, list[int]]:
    """Every layer of the sentence run alone, and the positions stored: pieces that are neither special
    tokens nor whitespace only (byte-level BPE's lone 'Ġ' belongs to no word)."""
    encoding = loaded.tokenizer(text, return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True)
    special = encoding.pop("special_tokens_mask")[0].bool().numpy()
    spans = encoding.pop("offset_mapping")[0].tolist()
    with torch.inference_mode():
        output = loaded.model(**encoding, output_hidden_states=True)
    hidden = torch.stack(output.hidden_states)[:, 0].numpy()  # (layers, tokens, dim)
    return hidden, [i for i in range(len(special)) if not special[i] and text[spans[i][0] : spans[i][1]].strip()]


def test_a_lagging_writer_never_sees_a_reused_window_buffer_overwritten(tiny_model, tmp_path, monkeypatch):
    """The windows' buffers are reused once written (at most WRITER_DEPTH + 2 of them): with a writer slower
    than the forward passes (the queue full all the time) and more windows than buffers, every row is
    stored as with a fast writer."""
    from contextuality.extraction import writer

    loaded, _ = tiny_model
    texts = [f"{text} ({copy})" for copy in range(5) for text in SENTENCES]  # batch size 1: 10 windows of 4
    sentences = pd.DataFrame({"sentence_id": range(len(texts)), "text": texts})
    words = word_table(sentences)
    assert len(texts) > (extract.WRITER_DEPTH + 2) * extract.WINDOW_BATCHES
    _extract(loaded, sentences, words, tmp_path / "fast", batch_size=1)
    resolve = writer.HostBlock.resolve

    def slow_resolve(self):
        time.sleep(0.05)
        return resolve(self)

    monkeypatch.setattr(writer.HostBlock, "resolve", slow_resolve)
    _extract(loaded, sentences, words, tmp_path / "slow", batch_size=1)
    with h5py.File(tmp_path / "fast" / "shard.h5") as fast, h5py.File(tmp_path / "slow" / "shard.h5") as slow:
        for layer in range(loaded.n_layers):
            np.testing.assert_array_equal(fast[f"layer_{layer:02d}"][:], slow[f"layer_{layer:02d}"][:])


@pytest.mark.parametrize("batch_size, max_batch_tokens", [(1, None), (3, None), (8, None), (8, 24)])
def test_stored_vectors_equal_a_direct_call_on_the_sentence_alone(
    tiny_model, corpus, tmp_path, batch_size, max_batch_tokens
):
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    _extract(loaded, sentences, words, tmp_path, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    units = pd.read_parquet(tmp_path / "units.parquet")
    with h5py.File(tmp_path / "shard.h5") as shard:
        offsets = shard["sentence_offsets"][:]
        stored = np.stack([shard[f"layer_{layer:02d}"][:] for layer in range(loaded.n_layers)])
    for i, text in enumerate(SENTENCES):
        rows = slice(offsets[i], offsets[i + 1])
        if not text:
            assert offsets[i] == offsets[i + 1]
            continue
        hidden, kept = _direct_hidden(loaded, text)
        assert stored[:, rows].shape[1] == len(kept)  # special tokens ran but were not stored
        np.testing.assert_allclose(stored[:, rows], hidden[:, kept], atol=1e-4)
    tokens = loaded.tokenizer.convert_ids_to_tokens(loaded.tokenizer(SENTENCES[0])["input_ids"])
    assert units[units["sentence_id"] == 0]["unit"].tolist() == [t for t in tokens if t not in ("[CLS]", "[SEP]", "Ġ")]


def test_batches_close_at_the_sentence_or_token_cap_and_a_longer_sentence_runs_alone(caplog):
    """Lengths 3 3 4 5 9 20 in run order, 3 sentences and 12 padded tokens at most: 3 x 4 = 12 fits, then the
    sentence cap closes; 5 and 9 would pad to 18; 20 is over the cap on its own and runs alone, named."""
    lengths = np.array([3, 3, 4, 5, 9, 20])
    names = np.array([10, 11, 12, 13, 14, 15])
    with caplog.at_level("WARNING", logger="contextuality.extraction.windows"):
        batches = list(windows.length_batches(np.arange(6), lengths, 3, 12, names))
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3], [4], [5]]
    assert [r.getMessage() for r in caplog.records] == [
        "sentence 15 has 20 tokens, more than extraction.max_batch_tokens (12): it runs alone, and its forward pass "
        "holds 20 tokens"
    ]
    # without a cap only the sentence count closes a batch; unsorted (stateful ELMo) the widest so far pads
    assert [b.tolist() for b in windows.length_batches(np.arange(6), lengths, 3, None, names)] == [[0, 1, 2], [3, 4, 5]]
    assert [b.tolist() for b in windows.length_batches(np.arange(4), np.array([6, 1, 1, 2]), 4, 12, names)] == [
        [0, 1],
        [2, 3],
    ]


def test_a_token_cap_bounds_every_forward_pass_and_a_long_sentence_runs_alone(tiny_model, corpus, tmp_path, caplog):
    """With batch_size 16 the corpus is one pass, every sentence padded to the long one's length; under a cap of
    32 tokens no pass's hidden states hold more than 32 tokens x layers x dim, except the long sentence's, alone
    and named in a warning; the stored vectors equal the uncapped run's within the batch-size tolerance (1e-4)."""
    loaded, _ = tiny_model
    long_text = " ".join(["the dog sleeps on the mat near the cat"] * 6)
    texts = SENTENCES + [long_text]
    sentences = pd.DataFrame({"sentence_id": range(len(texts)), "text": texts})
    words = word_table(sentences)
    dim, forward = loaded.model.config.hidden_size, windows.model_forward(loaded)
    runs = {}
    for cap in (None, 32):
        passes = []

        def recording(ids, mask, passes=passes):
            hidden = forward(ids, mask)
            passes.append((ids.shape, sum(h.numel() for h in hidden)))
            return hidden

        caplog.clear()
        with caplog.at_level("WARNING", logger="contextuality.extraction.windows"):
            plan, _ = extract_planned(
                loaded, sentences, words, tmp_path / str(cap), batch_size=16, max_batch_tokens=cap, forward=recording
            )
        runs[cap] = passes, [r.getMessage() for r in caplog.records]
    n_long = int(np.diff(plan.token_offsets)[-1])
    assert n_long > 50
    uncapped, _ = runs[None]
    running = int((np.diff(plan.token_offsets) > 0).sum())  # an empty sentence runs only with [CLS]/[SEP]
    assert [tuple(shape) for shape, _ in uncapped] == [(running, n_long)]
    capped, warnings = runs[32]
    alone = [(tuple(shape), elements) for shape, elements in capped if shape[1] > 32]
    assert alone == [((1, n_long), n_long * loaded.n_layers * dim)]
    assert all(elements <= 32 * loaded.n_layers * dim for shape, elements in capped if shape[1] <= 32)
    assert warnings == [
        f"sentence {len(texts) - 1} has {n_long} tokens, more than extraction.max_batch_tokens (32): "
        f"it runs alone, and its forward pass holds {n_long} tokens"
    ]
    with h5py.File(tmp_path / "None" / "shard.h5") as a, h5py.File(tmp_path / "32" / "shard.h5") as b:
        for layer in range(loaded.n_layers):
            np.testing.assert_allclose(b[f"layer_{layer:02d}"][:], a[f"layer_{layer:02d}"][:], rtol=0, atol=1e-4)


def test_elmo_batches_follow_the_token_cap():
    """ELMo's words go through the same batching: sorted by length, at most 6 padded words a batch."""
    calls = []

    class Embedder:
        def embed_batch(self, batch):
            calls.append([len(words) for words in batch])
            return [np.full((3, len(words), 2), len(words), dtype=np.float32) for words in batch]

    model = ElmoEncoder("elmo", Embedder(), n_layers=3, width=2)
    sentences = [["w"] * n for n in (2, 1, 7, 3, 2)]
    arrays = model.forward_block(sentences, batch_size=4, max_tokens=6)
    assert calls == [[1, 2, 2], [3], [7]]
    assert [a.shape[1] for a in arrays] == [2, 1, 7, 3, 2]


def test_an_encoder_says_its_models_layers_width_and_final_norm(tiny_model):
    """One answer per model: BERT (post-norm) has no final norm, GPT-2's last hidden state is after ``ln_f``; an
    encoder given to ``encoder_for`` is itself; ELMo has no final norm and reads spaCy words."""
    loaded, spec = tiny_model
    encoder = encoder_for(loaded)
    assert encoder_for(encoder) is encoder and encoder.tokenized is encoder
    assert (encoder.n_layers, encoder.width, encoder.key) == (3, 32, loaded.key)
    assert encoder.tokenizer_name == type(loaded.tokenizer).__name__
    norm = {"bert": "", "gpt2": "ln_f"}[spec["architecture"]]
    assert encoder.final_norm == norm
    assert [encoder.after_final_norm(layer) for layer in range(3)] == [0, 0, int(bool(norm))]
    elmo = ElmoEncoder("elmo", object(), n_layers=3, width=4)
    assert (elmo.final_norm, elmo.tokenizer_name, elmo.tokenized, elmo.after_final_norm(2)) == ("", "spacy", None, 0)


def test_a_windows_rows_kept_on_the_device_are_those_handed_to_the_host(tiny_model, corpus):
    """``windows(layers=..., to_host=False)`` (the device measurement's passes, stopping after the deepest layer
    kept) gives the kept layers' rows of the host blocks (extraction's), exactly, for a Hugging Face model and
    for ELMo."""

    class Embedder:
        def embed_batch(self, batch):
            return [np.arange(3 * len(w) * 2, dtype=np.float32).reshape(3, len(w), 2) + len(w) for w in batch]

    loaded, _ = tiny_model
    sentences, words, _ = corpus
    options = dict(batch_size=3, max_batch_tokens=None, pooling="first", device="cpu", storage_dtype="float32")
    for encoder, plan in ((encoder_for(loaded), _plan(loaded, sentences, words)),
                          (ElmoEncoder("elmo", Embedder(), n_layers=3, width=2), plan_words(sentences, words))):  # fmt: skip
        host = np.concatenate([block.resolve() for _, block, _ in encoder.windows(plan, **options)], axis=1)
        kept = []
        for _, rows, _, release in encoder.windows(plan, **options, layers=[1, 0], to_host=False):
            kept.append(rows.clone().numpy())
            release()
        np.testing.assert_array_equal(np.concatenate(kept, axis=1), host[[1, 0]])


def test_word_mode_pools_the_pieces_of_each_word(tiny_model, corpus, tmp_path):
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    for pooling in ("first", "last", "mean"):
        out = tmp_path / pooling
        out.mkdir()
        _extract(loaded, sentences, words, out, indexing="word", pooling=pooling)
        units = pd.read_parquet(out / "units.parquet")
        with h5py.File(out / "shard.h5") as shard:
            offsets = shard["sentence_offsets"][:]
            stored = shard["layer_02"][:]
        text = SENTENCES[1]
        spacy_words = words[words["sentence_id"] == 1]["word"].tolist()
        assert units[units["sentence_id"] == 1]["unit"].tolist() == spacy_words
        hidden, _ = _direct_hidden(loaded, text)
        encoding = loaded.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        start = text.index("extraordinarily")
        pieces = [
            i
            for i, ((a, b), special) in enumerate(zip(encoding["offset_mapping"], encoding["special_tokens_mask"]))
            if not special and text[a:b].strip() and start <= a + (text[a] == " ") < start + len("extraordinarily")
        ]
        assert len(pieces) > 1, "the test needs a word split into several pieces"
        expected = {"first": hidden[2, pieces[0]], "last": hidden[2, pieces[-1]], "mean": hidden[2, pieces].mean(0)}
        row = offsets[1] + spacy_words.index("extraordinarily")
        np.testing.assert_allclose(stored[row], expected[pooling], atol=1e-4)


def test_subword_mode_maps_pieces_to_their_word(tiny_model, corpus, tmp_path):
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    _extract(loaded, sentences, words, tmp_path)
    units = pd.read_parquet(tmp_path / "units.parquet")
    target = words[(words["sentence_id"] == 1) & (words["word"] == "extraordinarily")]["position"].item()
    pieces = units[(units["sentence_id"] == 1) & (units["word_position"] == target)]["unit"].tolist()
    assert len(pieces) > 1
    assert "".join(p.replace("##", "").replace("Ġ", "") for p in pieces) == "extraordinarily"
    assert units[units["unit"].isin([".", ",", "!", "?"])]["is_punct"].all()


def test_shards_gathered_equal_a_one_shard_run(tiny_model, corpus, tmp_path, monkeypatch):
    loaded, _ = tiny_model
    monkeypatch.setattr(windows, "WINDOW_BATCHES", 1)  # batch_size 2 -> windows of 2 sentences
    sentences, words, _ = corpus
    one = tmp_path / "one"
    one.mkdir()
    plan, _ = extract_planned(loaded, sentences, words, one, batch_size=2)
    shard_paths = []
    for shard in range(3):
        first, last = shard_bounds(len(sentences), 3, shard, window=2)  # windows of 2 sentences
        assert last > first
        extract_planned(loaded, sentences, words, tmp_path / f"s{shard}", batch_size=2, plan=plan.slice(first, last))
        shard_paths.append(tmp_path / f"s{shard}" / "shard.h5")
    layers = gather_layers(shard_paths, one / "units.parquet", tmp_path)
    with h5py.File(one / "shard.h5") as reference:
        for layer, path in layers.items():
            with open_complete(path) as gathered:
                np.testing.assert_array_equal(gathered["vectors"][:], reference[f"layer_{layer:02d}"][:])
                np.testing.assert_array_equal(gathered["sentence_offsets"][:], reference["sentence_offsets"][:])
    for shard, path in enumerate(shard_paths):  # each shard stores its slice of the one plan, rows numbered on
        with h5py.File(path) as stored:
            first, last = shard_bounds(len(sentences), 3, shard, window=2)
            assert stored.attrs["first_row"] == plan.unit_offsets[first]
    assert plan.units["row"].tolist() == list(range(len(plan.units)))


def test_truncation_drops_the_tail_and_its_occurrences(tiny_model, corpus, tmp_path):
    loaded, spec = tiny_model
    sentences, words, _ = corpus
    loaded.max_length = 6
    try:
        stats = _extract(loaded, sentences, words, tmp_path, indexing="word")
    finally:
        loaded.max_length = 128
    assert stats["truncated"] >= 3
    units = pd.read_parquet(tmp_path / "units.parquet").assign(row=lambda u: range(len(u)))
    assert units.groupby("sentence_id").size().max() <= 6
    index = word_index(words, sentences, min_occurrences=2, count="occurrences")
    occurrences = build_occurrences(units, index, "word", 2, "occurrences", sentences)
    assert set(zip(occurrences["sentence_id"], occurrences["position"])) <= set(
        zip(units["sentence_id"], units["position"])
    )
    assert len(occurrences) < len(index)


def test_over_long_sentences_under_policy_error_stop_with_the_sentence_id(tiny_model, corpus, tmp_path):
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    loaded.max_length = 6
    try:
        with pytest.raises(Exception, match=r"sentence \d+ has \d+ tokens, more than model '\w+' takes \(6\)"):
            _extract(loaded, sentences, words, tmp_path, policy="error")
    finally:
        loaded.max_length = 128
    assert not (tmp_path / "shard.h5").exists()


def _forward_changing(loaded, layer: int, change):
    """The model's forward pass with ``change(hidden, input_ids)`` applied to one layer's hidden states."""
    forward = windows.model_forward(loaded)

    def changed(ids, mask):
        hidden = list(forward(ids, mask))
        hidden[layer] = change(hidden[layer].clone(), ids)
        return hidden

    return changed


def _plan(loaded, sentences, words):
    from contextuality.extraction.plan import plan_model

    return plan_model(loaded, sentences, words, indexing="subword", tokenization="natural", policy="truncate")


def _extract_with(loaded, plan, out: Path, forward, storage_dtype: str):
    return extract.extract_shard(loaded, plan, out, pooling="first", batch_size=3, storage_dtype=storage_dtype,
                                 device="cpu", disk_factor=1.0, attrs={"shard": 0}, forward=forward)  # fmt: skip


def test_a_non_finite_value_from_the_model_stops_the_shard_naming_layer_and_sentence(tiny_model, corpus, tmp_path):
    """A NaN at layer 2 wherever one token (sentence 3's first stored piece) is input: refused before anything is
    written, naming the model, shard, layer, and the first sentence in corpus order storing that token, with its
    unit and row; no shard file is left."""
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    plan = _plan(loaded, sentences, words)
    first = plan.units["token_first"].to_numpy()
    sentence_of_unit = np.repeat(np.arange(len(plan.sentence_ids)), np.diff(plan.unit_offsets))
    unit_ids = plan.input_ids[plan.token_offsets[sentence_of_unit] + first]
    target = unit_ids[plan.unit_offsets[3]]
    row = int(np.flatnonzero(unit_ids == target)[0])  # the first stored unit of that token, in corpus order

    def nan_at_target(states, ids):
        states[ids == int(target)] = float("nan")
        return states

    forward = _forward_changing(loaded, 2, nan_at_target)
    message = (rf"shard\.h5: model '{loaded.key}', shard 0, layer 2, sentence {sentence_of_unit[row]} \(unit "
               rf"'{plan.units['unit'].iat[row]}', row {row} of the shard\): the vector holds nan from the model's "
               r"forward pass; nothing was stored")  # fmt: skip
    for storage_dtype in ("float32", "float16"):
        with pytest.raises(NonFiniteError, match=message) as refused:
            _extract_with(loaded, plan, tmp_path / "shard.h5", forward, storage_dtype)
        assert "\n" not in str(refused.value)
        assert not list(tmp_path.glob("*.h5")) and not list(tmp_path.glob(".*.tmp-*"))


def test_float16_overflow_at_the_storage_cast_stops_the_shard(tiny_model, corpus, tmp_path):
    """Activations of 1e5 at layer 1 are finite in float32 (stored as they are) but beyond float16's range: with
    storage_dtype float16 the shard is refused, naming the cast and the way out."""
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    forward = _forward_changing(loaded, 1, lambda states, ids: states * 1e5 + 1e5)
    plan = _plan(loaded, sentences, words)
    stats = _extract_with(loaded, plan, tmp_path / "wide.h5", forward, "float32")
    with h5py.File(tmp_path / "wide.h5") as shard:
        assert np.abs(shard["layer_01"][:]).max() > 65504 and np.isfinite(shard["layer_01"][:]).all()
    assert stats["units"] > 0
    with pytest.raises(NonFiniteError, match=(
        rf"narrow\.h5: model '{loaded.key}', shard 0, layer 1, sentence 0 \(unit '[^']+', row 0 of the shard\): the "
        r"vector holds -?inf after the cast to float16: an activation beyond float16's range \(\|x\| > 65504\), or "
        r"infinite in the model; nothing was stored \(set extraction.storage_dtype: float32"
    )):  # fmt: skip
        _extract_with(loaded, plan, tmp_path / "narrow.h5", forward, "float16")
    assert not (tmp_path / "narrow.h5").exists() and not list(tmp_path.glob(".*.tmp-*"))


def test_classic_export_has_one_dataset_per_sentence_and_word2sent(tiny_model, corpus, tmp_path):
    loaded, _ = tiny_model
    sentences, words, _ = corpus
    _extract(loaded, sentences, words, tmp_path)
    layers = gather_layers([tmp_path / "shard.h5"], tmp_path / "units.parquet", tmp_path / "gathered")
    units = pd.read_parquet(tmp_path / "units.parquet")
    occurrences = build_occurrences(units, None, "subword", 2, "occurrences", sentences)
    export_classic(
        [layers[layer] for layer in sorted(layers)],
        occurrences,
        tmp_path / "classic.h5",
        tmp_path / "w2s.json",
        sentences=sentences,
    )
    word2sent = json.loads((tmp_path / "w2s.json").read_text())
    with h5py.File(tmp_path / "classic.h5") as classic, open_complete(layers[1]) as layer1:
        offsets = layer1["sentence_offsets"][:]
        for i in range(len(SENTENCES)):
            block = classic[str(i)]
            assert block.shape == (loaded.n_layers, offsets[i + 1] - offsets[i], 32)
            np.testing.assert_array_equal(block[1], layer1["vectors"][offsets[i] : offsets[i + 1]])
        word, pairs = next(iter(word2sent.items()))
        sentence, position = pairs[0]
        row = offsets[sentence] + position
        np.testing.assert_array_equal(classic[str(sentence)][1][position], layer1["vectors"][row])
        assert units.loc[row, "unit"] == word
        to_index = json.loads(classic["sentence_to_index"][()])  # allennlp's map: text -> dataset key
        assert to_index[SENTENCES[5]] == "5" and to_index["The dog sleeps."] == "2"
