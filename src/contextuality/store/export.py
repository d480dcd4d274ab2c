"""The classic layout of the paper's code and allennlp's `elmo` command (``extraction.export_classic``)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from contextuality.core import diskspace
from contextuality.core.atomic import atomic_path
from contextuality.store.files import read_checked
from contextuality.store.reader import LayerReader, Manifest, check_layer

EXPORT_CHUNK_SENTENCES = 1000


def export_classic(
    layer_paths: list[Path],
    occurrences: pd.DataFrame,
    out_h5: Path,
    out_word2sent: Path,
    disk_factor: float = 1.2,
    sentences: pd.DataFrame | None = None,
    manifest: Manifest | None = None,
) -> None:
    """One HDF5 per model, one dataset per sentence index (a string) of shape ``(layers, tokens, dim)``.

    Also ``sentence_to_index`` (a JSON string, as allennlp's ``elmo`` command writes it: each sentence's
    text to its dataset key; a text that occurs twice keeps its last key, as there) and
    ``word2sent.json`` mapping each word to its ``[sentence index, token position]`` pairs. Written a
    chunk of sentences at a time: memory stays at one chunk of every layer. With a ``manifest``
    (``read_manifest``), the layer files must be its layers, in order, each read as ``LayerReader`` checks it.
    """
    stack = contextlib.ExitStack()  # the disk reservation, held while writing
    readers: list[LayerReader] = []
    try:
        for layer, path in enumerate(layer_paths):
            if manifest is not None:
                check_layer(path, manifest, layer)
            readers.append(LayerReader(path, manifest))
        needed = sum(reader.shape[0] * reader.shape[1] * reader.dtype.itemsize for reader in readers)
        stack.enter_context(
            diskspace.reserve(out_h5, needed, disk_factor, ways=diskspace.ways_out(readers[0].dtype.name))
        )
        offsets = readers[0].offsets
        ids = read_checked(readers[0].handle["sentence_ids"], readers[0].path)
        with atomic_path(out_h5) as tmp, h5py.File(tmp, "w") as out:
            for first in range(0, len(ids), EXPORT_CHUNK_SENTENCES):
                last = min(first + EXPORT_CHUNK_SENTENCES, len(ids))
                chunk = np.stack([reader.rows(offsets[first], offsets[last]) for reader in readers])
                for i in range(first, last):
                    out.create_dataset(
                        str(int(ids[i])), data=chunk[:, offsets[i] - offsets[first] : offsets[i + 1] - offsets[first]]
                    )
            texts = (
                {} if sentences is None else dict(zip(sentences["sentence_id"].tolist(), sentences["text"].tolist()))
            )
            to_index = {texts[int(i)]: str(int(i)) for i in ids if int(i) in texts}
            out.create_dataset("sentence_to_index", data=json.dumps(to_index))
    finally:
        stack.close()
        for reader in readers:
            reader.close()
    word2sent = {
        word: group[["sentence_id", "position"]].astype(int).values.tolist()
        for word, group in occurrences.groupby("word", sort=True)
    }
    with atomic_path(out_word2sent) as tmp:
        tmp.write_text(json.dumps(word2sent))
