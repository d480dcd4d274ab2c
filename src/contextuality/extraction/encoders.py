"""The models behind one interface, the ``Encoder``: a Hugging Face model, or ELMo reading spaCy words.

An encoder says what extraction and the device measurement need of a model: its layers (``n_layers``, input
embeddings included), its width (the hidden size), its final-norm rule (which layer transformers returns after a
pre-norm decoder's final norm) and its forward passes over a plan in windows (``windows``), each window's rows
handed to the host for the shard's writer (``extraction.extract``) or kept on the device for measuring there
(``measure.device_job``). ``load_encoder`` and ``encoder_for`` are the one place that asks which kind a model is.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextuality.core.settings import WINDOW_BATCHES, ShardSettings
from contextuality.extraction import windows as passes
from contextuality.extraction.alignment import Plan
from contextuality.extraction.writer import HostBlock, block_extent

log = logging.getLogger(__name__)


class Encoder(ABC):
    """A model as extraction and the device measurement run it.

    ``key``: the model's key; ``n_layers``: the hidden states a pass returns, the input embeddings' first;
    ``width``: a hidden state's size; ``max_length``: the most tokens a sentence may feed it; ``final_norm``: the
    name of the final norm a pre-norm decoder applies after its last block ("" when none does);
    ``tokenizer_name``: what splits its sentences (recorded by every shard)."""

    key: str
    n_layers: int
    width: int
    max_length: int
    final_norm: str
    tokenizer_name: str

    def after_final_norm(self, layer: int) -> int:
        """1 for a pre-norm decoder's last layer, which transformers returns after the final norm (as the store's
        layer files record it), else 0."""
        return int(bool(self.final_norm) and layer == self.n_layers - 1)

    @property
    def tokenized(self):
        """The model as the plan reads it (``extraction.plan.plan_occurrences``): itself when it has a tokenizer
        (``tokenizer``, ``max_length``, ``key``), None when it reads spaCy words."""
        return self

    @abstractmethod
    def windows(self, plan: Plan, *, batch_size: int, max_batch_tokens: int | None, pooling: str, device: str,
                storage_dtype: str, forward=None, layers=None, to_host: bool = True):  # fmt: skip
        """The forward passes over ``plan``'s sentences in windows (``extraction.windows``), each window's rows of
        the ``layers`` kept (default: every layer, in order) in the storage dtype and corpus order.

        Yields (first unit row of the window, its block, window end): the block for the shard's writer (a
        ``DeviceBlock`` or ``HostBlock``, layers x rows x width). ``to_host=False``: (first row, rows, window end,
        release), the rows a tensor where the passes left them, ``release()`` once they are taken. ``forward``
        replaces the model's forward pass (default: the model's, stopping after the deepest layer kept)."""


@dataclass
class HuggingFaceEncoder(Encoder):
    """A Hugging Face model (``models.loading.LoadedModel``): its tokenizer's pieces run through ``windows.hf_windows``."""

    loaded: object  # models.loading.LoadedModel (or a stand-in with its fields)

    @property
    def key(self) -> str:
        return self.loaded.key

    @property
    def n_layers(self) -> int:
        return self.loaded.n_layers

    @property
    def max_length(self) -> int:
        return self.loaded.max_length

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def width(self) -> int:
        return self.loaded.model.config.hidden_size

    @property
    def final_norm(self) -> str:
        from contextuality.models.loading import final_norm

        return final_norm(self.loaded.model)

    @property
    def tokenizer_name(self) -> str:
        return type(self.loaded.tokenizer).__name__

    def windows(self, plan: Plan, *, batch_size: int, max_batch_tokens: int | None, pooling: str, device: str,
                storage_dtype: str, forward=None, layers=None, to_host: bool = True):  # fmt: skip
        if forward is None and layers is not None:  # the passes stop after the deepest layer kept
            forward = passes.stop_after(self, max(layers), passes.model_forward(self))
        return passes.hf_windows(self, plan, batch_size=batch_size, max_batch_tokens=max_batch_tokens, pooling=pooling,
                                 device=device, storage_dtype=storage_dtype, forward=forward, layers=layers,
                                 to_host=to_host)  # fmt: skip


@dataclass
class ElmoEncoder(Encoder):
    """ELMo: its units are spaCy words (no pooling, no tokenizer of its own), its layers computed on its device and
    handed to the host by the embedder (``models.elmo.ElmoEmbedder``)."""

    key: str
    embedder: object
    n_layers: int
    width: int
    stateful: bool = False
    max_length: int = 10_000  # a character-CNN + LSTM has no position limit
    final_norm = ""  # an LSTM's layers have no final norm
    tokenizer_name = "spacy"

    @property
    def tokenized(self):
        return None

    def forward_block(
        self, sentences: list[list[str]], batch_size: int, max_tokens: int | None = None, names=None
    ) -> list[np.ndarray]:
        """Per sentence (layers, words, width) float32; stateful ELMo keeps corpus order (its state flows on).
        ``max_tokens`` caps the padded words per batch (``length_batches``); ``names``: the sentences' ids."""
        lengths = np.array([len(sentence) for sentence in sentences], dtype=np.int64)
        order = np.arange(len(sentences)) if self.stateful else np.argsort(lengths, kind="stable")
        names = np.arange(len(sentences)) if names is None else np.asarray(names)
        results: list[np.ndarray | None] = [None] * len(sentences)
        for indices in passes.length_batches(order, lengths[order], batch_size, max_tokens, names[order]):
            for index, array in zip(indices, self.embedder.embed_batch([sentences[i] for i in indices])):
                results[index] = np.asarray(array, dtype=np.float32)
        return results

    def windows(self, plan: Plan, *, batch_size: int, max_batch_tokens: int | None, pooling: str, device: str,
                storage_dtype: str, forward=None, layers=None, to_host: bool = True):  # fmt: skip
        """As ``Encoder.windows``; ``pooling``, ``device`` and ``forward`` do not apply (the embedder's rows are
        words, on the host). A stateful ELMo starts every call from the zero state (a first pass's)."""
        import torch

        if self.stateful:
            self.embedder.reset_states()
        words = plan.units["unit"].tolist()
        window = WINDOW_BATCHES * batch_size
        n_sentences = len(plan.sentence_ids)
        for w0 in range(0, n_sentences, window):
            w1 = min(w0 + window, n_sentences)
            sentences = [words[plan.unit_offsets[i] : plan.unit_offsets[i + 1]] for i in range(w0, w1)]
            arrays = self.forward_block(sentences, batch_size, max_batch_tokens, plan.sentence_ids[w0:w1])
            arrays = [a for a in arrays if a is not None and a.shape[1]]
            block = (
                np.concatenate(arrays, axis=1).astype(storage_dtype)
                if arrays
                else np.zeros((self.n_layers, 0, self.width), storage_dtype)
            )
            block = block if layers is None else block[list(layers)]
            if to_host:
                yield int(plan.unit_offsets[w0]), HostBlock(torch.from_numpy(block), bounds=block_extent(block)), w1
            else:
                yield int(plan.unit_offsets[w0]), torch.from_numpy(block), w1, lambda: None


def encoder_for(model) -> Encoder:
    """``model`` as an encoder: itself when it is one, else a loaded Hugging Face model (``LoadedModel``)."""
    return model if isinstance(model, Encoder) else HuggingFaceEncoder(model)


def load_encoder(key: str, settings: ShardSettings, record: dict, model_dir: Path, device: str) -> Encoder:
    """The model of ``record`` (its source.json) from the materialised folder ``model_dir``, on ``device``, as an
    encoder: ELMo from its own files, any other a Hugging Face model."""
    from contextuality.models import loading
    from contextuality.models.sources import SOURCES

    if SOURCES[record["source"]].hf_folder:
        return HuggingFaceEncoder(loading.load(record, model_dir, device, settings.compute_dtype,
                                               max_length=settings.max_length, allow_pickle=settings.allow_pickle))  # fmt: skip
    from contextuality.models.elmo import ElmoEmbedder

    loading.verify_model_files(record, model_dir)
    if settings.stateful:
        log.warning(
            "stateful ELMo: LSTM state is carried across sentences in corpus order within each "
            "shard; models.%s.n_shards: 1 reproduces the original single-embedder run exactly",
            key,
        )
    options_path, weights_path = Path(model_dir) / loading.ELMO_OPTIONS, Path(model_dir) / loading.ELMO_WEIGHTS
    embedder = ElmoEmbedder(options_path, weights_path, device=device, stateful=settings.stateful)
    options = json.loads(options_path.read_text())
    return ElmoEncoder(key, embedder, options["lstm"]["n_layers"] + 1, 2 * options["lstm"]["projection_dim"],
                       settings.stateful)  # fmt: skip
