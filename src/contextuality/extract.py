"""Run sentences through a model and store every layer's vectors of every stored unit.

A *unit* is what the measurements call a word occurrence:

* ``indexing: subword``: every model piece (WordPiece, BPE) is its own unit, as the paper did for
  BERT; its string is the piece (``##ing``, ``Ġdog``).
* ``indexing: word``: every spaCy word is a unit; its vector pools the word's pieces (``first``,
  ``last`` or ``mean``).

Pieces are aligned to spaCy words by character offsets (the first non-space character of a piece
falls inside exactly one word). Special tokens (``[CLS]``, ``[SEP]``, BOS) go through the model but
are never stored. Layer 0 is the input-embedding layer.

Sentences are processed in corpus order in windows of a few batches; inside a window they are sorted
by length and padded per batch (with attention masks), so padding costs little, and every window is
written to HDF5 as one contiguous slab per layer (memory stays at one window's vectors).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
from tqdm import tqdm

from contextuality.atomic import atomic_path
from contextuality.store import create_checked, layer_name
from contextuality.words import is_punct

log = logging.getLogger(__name__)

# Sentences are length-sorted within windows of this many batches. Windows sit at fixed corpus
# positions and shards are cut between windows, so a sentence meets the same batch neighbours however
# many shards there are: gathered shards then equal a one-shard run bit for bit.
WINDOW_BATCHES = 4
PIECE_MARKERS = ("##", "Ġ", "▁")


class ExtractionError(RuntimeError):
    """Extraction cannot proceed (disk, device, over-long sentence under policy 'error')."""


@dataclass
class AlignedSentence:
    """One tokenized sentence: model ids and, per stored unit, the token positions it pools."""

    sentence_id: int
    input_ids: list[int]
    unit_tokens: list[list[int]]   # token positions (into input_ids) of each stored unit
    units: list[str]
    word_positions: list[int]
    unit_is_punct: list[bool]
    truncated: bool


def shard_bounds(n_sentences: int, n_shards: int, shard: int, window: int = 1) -> tuple[int, int]:
    """Contiguous sentence positions of ``shard``, cut between windows (counts differ by at most one window)."""
    n_windows = -(-n_sentences // window)
    first = n_windows * shard // n_shards * window
    last = n_windows * (shard + 1) // n_shards * window
    return min(first, n_sentences), min(last, n_sentences)


def strip_marker(piece: str) -> str:
    for marker in PIECE_MARKERS:
        if piece.startswith(marker) and len(piece) > len(marker):
            return piece[len(marker):]
    return piece


def align_sentence(
    sentence_id: int,
    text: str,
    word_starts: list[int],
    words: list[str],
    encoding,
    tokens: list[str],
    *,
    indexing: str,
    truncated: bool,
) -> AlignedSentence:
    """Map the model's pieces of one sentence to spaCy words and build its stored units."""
    ids = encoding["input_ids"]
    special = encoding["special_tokens_mask"]
    offsets = encoding["offset_mapping"]
    word_ends = [start + len(word) for start, word in zip(word_starts, words)]
    starts = np.asarray(word_starts)
    piece_word = []
    for position, ((begin, end), is_special) in enumerate(zip(offsets, special)):
        if is_special or end <= begin:
            piece_word.append(-1)
            continue
        while begin < end and text[begin].isspace():  # byte-level BPE pieces carry their leading space
            begin += 1
        word = int(np.searchsorted(starts, begin, side="right")) - 1
        piece_word.append(word if 0 <= word < len(words) and begin < word_ends[word] else -1)
    unit_tokens, units, word_positions, punct = [], [], [], []
    if indexing == "subword":
        for position, word in enumerate(piece_word):
            if word < 0:
                continue
            unit_tokens.append([position])
            units.append(tokens[position])
            word_positions.append(word)
            punct.append(is_punct(strip_marker(tokens[position])))
    else:
        pieces_of: dict[int, list[int]] = {}
        for position, word in enumerate(piece_word):
            if word >= 0:
                pieces_of.setdefault(word, []).append(position)
        for word in sorted(pieces_of):
            unit_tokens.append(pieces_of[word])
            units.append(words[word])
            word_positions.append(word)
            punct.append(is_punct(words[word]))
    return AlignedSentence(sentence_id, list(ids), unit_tokens, units, word_positions, punct, truncated)


def pool(hidden: np.ndarray, token_lists: list[list[int]], pooling: str) -> np.ndarray:
    """Vectors of the units of one sentence from its token vectors (layers, tokens, dim)."""
    if pooling == "first" or all(len(tokens) == 1 for tokens in token_lists):
        return hidden[:, [tokens[0] for tokens in token_lists]]
    if pooling == "last":
        return hidden[:, [tokens[-1] for tokens in token_lists]]
    return np.stack([hidden[:, tokens].mean(axis=1) for tokens in token_lists], axis=1)


# Test hook (documented in docs/scaling.md): with CONTEXTUALITY_FAKE_GPUS=1 in the environment the
# device choice below runs as if CUDA were present (same leases, same CUDA_VISIBLE_DEVICES handling)
# but the shard is computed on the CPU, and each choice is appended as one JSON line (shard, device,
# CUDA_VISIBLE_DEVICES, SLURM_JOB_ID, host, pid, start and end times) to <lease_dir>/fake-devices.jsonl.
# tests/test_devices.py and tests/slurm/run.sh read that file; normal runs never set the variable.
FAKE_GPUS_ENV = "CONTEXTUALITY_FAKE_GPUS"


class _RecordedLease:
    """A device lease (flock handle or None) that appends its record with the release time on close()."""

    def __init__(self, handle, record: dict, path: Path):
        self.handle, self.record, self.path = handle, record, path

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        with open(self.path, "a") as out:  # one short O_APPEND write per shard: lines never interleave
            out.write(json.dumps({**self.record, "end": time.time()}) + "\n")


def choose_device(requested: str, n_gpus: int, shard: int, lease_dir: Path) -> tuple[str, object]:
    """The torch device for a shard, and the lease that keeps it ours (or None).

    * ``cpu``, or ``auto`` without CUDA: the CPU. ``cuda:N``: exactly that device, no lease.
    * ``CUDA_VISIBLE_DEVICES`` lists exactly one device: a scheduler (SLURM ``--gpus=1``, Kubernetes,
      or the user) gave this job its GPU, which the process sees as ``cuda:0`` whatever its physical
      id: use ``cuda:0`` without a lease (jobs on other nodes share the lease folder on a cluster).
    * Otherwise (one multi-GPU box): the job takes a non-blocking ``flock`` on the first free lease of
      the visible devices, starting at ``shard mod count`` (count = ``n_gpus``, capped at the devices
      CUDA reports; the indices of ``CUDA_VISIBLE_DEVICES`` if it lists several). The lease is held
      for the life of the process, so the kernel frees it even on SIGKILL; its file is named by host
      and physical id, so two jobs never share a device even when their ``CUDA_VISIBLE_DEVICES``
      differ. Snakemake's ``gpu`` resource (``--resources gpu=N``, one per shard) caps how many shards
      run at once, so a lease is free at once; if not (more jobs than devices), the job waits for one.
    """
    import socket

    import torch

    fake = os.environ.get(FAKE_GPUS_ENV) == "1"
    if requested == "cpu" or (requested == "auto" and not (fake or torch.cuda.is_available())):
        return "cpu", None
    visible = [item.strip() for item in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if item.strip()]
    handle = None
    if requested.startswith("cuda:"):
        device = requested
    elif len(visible) == 1:
        device = "cuda:0"
    else:
        if visible:
            count = len(visible)
        else:
            count = (n_gpus or 1) if fake else torch.cuda.device_count()
        if n_gpus:
            count = min(count, n_gpus)
        if count < 1:
            raise ExtractionError(f"extraction.device is '{requested}' but no CUDA device is visible")
        lease_dir.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        device, waited = None, 0
        while device is None:
            for offset in range(count):
                index = (shard + offset) % count
                physical = visible[index] if visible else str(index)
                candidate = open(lease_dir / f"{host}-gpu{physical}.lock", "w")
                try:
                    fcntl.flock(candidate, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    candidate.close()
                    continue
                candidate.write(f"{os.getpid()} shard {shard}\n")
                candidate.flush()
                device, handle = f"cuda:{index}", candidate
                break
            else:
                # every lease is held by a live process (the kernel drops a dead one's): wait, never
                # share. Happens when --resources gpu=N exceeds the devices, or with extraction.n_gpus 0.
                if waited % 60 == 0:
                    log.warning("shard %d: all %d GPU leases in %s are held; waiting", shard, count, lease_dir)
                time.sleep(1)
                waited += 1
    if not fake:
        return device, handle
    lease_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "shard": shard, "device": device, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "host": socket.gethostname(), "pid": os.getpid(),
        "cwd": os.getcwd(), "start": time.time(),
    }
    log.info("fake GPU (%s=1): shard %d would run on %s; computing on the CPU", FAKE_GPUS_ENV, shard, device)
    return "cpu", _RecordedLease(handle, record, lease_dir / "fake-devices.jsonl")


def estimate_bytes(n_units: int, n_layers: int, dim: int, storage_dtype: str) -> int:
    return n_units * n_layers * dim * np.dtype(storage_dtype).itemsize


def check_disk(path: Path, needed: int, factor: float) -> None:
    """Stop before writing when the estimated output does not fit (with a margin)."""
    free = shutil.disk_usage(path if path.exists() else path.parent).free
    if free < needed * factor:
        raise ExtractionError(
            f"not enough disk for {path}: estimated output {_size(needed)} x margin {factor:g} "
            f"(extraction.min_free_disk_factor) = {_size(needed * factor)} > {_size(free)} free; "
            "free space, use storage_dtype float16, or set corpus.max_sentences"
        )
    log.info("disk: estimated output %s x margin %s fits in %s free", _size(needed), factor, _size(free))


def _size(n_bytes: float) -> str:
    """A byte count as the largest unit that keeps it at least 1 (bytes, kB, MB, GB, TB, PB)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(n_bytes) < 1000:
            return f"{n_bytes:.0f} bytes" if unit == "bytes" else f"{n_bytes:.2f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.2f} PB"


def tokenize_sentences(
    loaded, sentences: pd.DataFrame, words: pd.DataFrame, *, indexing: str, policy: str
) -> tuple[list[AlignedSentence], int, int]:
    """Tokenize and align every sentence; apply the over-length policy. Returns (aligned, truncated, skipped)."""
    tokenizer = loaded.tokenizer
    texts = sentences["text"].tolist()
    if not texts:  # more shards than windows of sentences: this shard is empty (and stored as such)
        return [], 0, 0
    options = {"add_special_tokens": True, "return_offsets_mapping": True, "return_special_tokens_mask": True}
    encodings = tokenizer(texts, truncation=False, **options)
    too_long = [len(ids) > loaded.max_length for ids in encodings["input_ids"]]
    if policy == "error" and any(too_long):
        first = int(sentences["sentence_id"].iloc[too_long.index(True)])
        raise ExtractionError(
            f"sentence {first} has more than {loaded.max_length} tokens for model '{loaded.key}' "
            "(extraction.max_length_policy: error); allowed policies: truncate, skip, error"
        )
    if any(too_long):  # re-encode only the over-long ones, letting the tokenizer keep its special tokens
        long_positions = [i for i, flag in enumerate(too_long) if flag]
        cut = tokenizer([texts[i] for i in long_positions], truncation=True, max_length=loaded.max_length, **options)
        encodings = {key: list(encodings[key]) for key in ("input_ids", "special_tokens_mask", "offset_mapping")}
        for j, i in enumerate(long_positions):
            for key in encodings:
                encodings[key][i] = cut[key][j]
    by_sentence = {sid: group for sid, group in words.groupby("sentence_id", sort=False)}
    aligned, skipped = [], 0
    for i, (sentence_id, text) in enumerate(zip(sentences["sentence_id"].tolist(), texts)):
        group = by_sentence.get(sentence_id)
        word_list = group["word"].tolist() if group is not None else []
        starts = group["char_start"].tolist() if group is not None else []
        encoding = {key: encodings[key][i] for key in ("input_ids", "special_tokens_mask", "offset_mapping")}
        tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
        item = align_sentence(
            sentence_id, text, starts, word_list, encoding, tokens, indexing=indexing, truncated=too_long[i]
        )
        if too_long[i] and policy == "skip":
            item = AlignedSentence(sentence_id, item.input_ids, [], [], [], [], True)
            skipped += 1
        aligned.append(item)
    return aligned, sum(too_long) - skipped, skipped


def padded_batch(batch: list[AlignedSentence], pad: int):
    """Input ids and attention mask of a batch, right-padded so real tokens keep positions 0..n-1."""
    import torch

    width = max(len(item.input_ids) for item in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, item in enumerate(batch):
        ids[row, : len(item.input_ids)] = torch.tensor(item.input_ids)
        mask[row, : len(item.input_ids)] = 1
    return ids, mask


def forward_block(loaded, block: list[AlignedSentence], batch_size: int, pooling: str, device: str):
    """Per-sentence pooled vectors (layers, units, dim) as float32, in the block's order."""
    if isinstance(loaded, ElmoModel):
        return loaded.forward_block(block, batch_size)
    import torch

    pad = loaded.tokenizer.pad_token_id
    dim = loaded.model.config.hidden_size
    results = [np.zeros((loaded.n_layers, 0, dim), dtype=np.float32)] * len(block)
    # an empty sentence has no token for a decoder without BOS: nothing to run, nothing to store
    order = sorted((i for i in range(len(block)) if block[i].input_ids), key=lambda i: len(block[i].input_ids))
    for start in range(0, len(order), batch_size):
        ids, mask = padded_batch([block[i] for i in order[start:start + batch_size]], pad)
        with torch.inference_mode():
            output = loaded.model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
        hidden = torch.stack(output.hidden_states, dim=1).float().cpu().numpy()  # (batch, layers, tokens, dim)
        for row, index in enumerate(order[start:start + batch_size]):
            if block[index].unit_tokens:
                results[index] = pool(hidden[row], block[index].unit_tokens, pooling)
    return results


@dataclass
class ElmoModel:
    """ELMo behind the same interface as a Hugging Face model: units are spaCy words."""

    key: str
    embedder: object
    n_layers: int
    dim: int
    stateful: bool = False
    max_length: int = 10_000  # a character-CNN + LSTM has no position limit

    def tokenize(self, sentences: pd.DataFrame, words: pd.DataFrame) -> list[AlignedSentence]:
        by_sentence = {sid: group["word"].tolist() for sid, group in words.groupby("sentence_id", sort=False)}
        aligned = []
        for sentence_id in sentences["sentence_id"].tolist():
            tokens = by_sentence.get(sentence_id, [])
            aligned.append(
                AlignedSentence(
                    sentence_id, tokens, [[i] for i in range(len(tokens))], tokens, list(range(len(tokens))),
                    [is_punct(token) for token in tokens], False,
                )
            )
        return aligned

    def forward_block(self, block: list[AlignedSentence], batch_size: int) -> list[np.ndarray]:
        # Stateful ELMo carries LSTM state from batch to batch: keep corpus order then.
        order = list(range(len(block))) if self.stateful else sorted(range(len(block)), key=lambda i: len(block[i].units))
        results: list[np.ndarray | None] = [None] * len(block)
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            arrays = self.embedder.embed_batch([block[i].units for i in indices])
            for index, array in zip(indices, arrays):
                results[index] = np.asarray(array, dtype=np.float32)
        return results


def extract_shard(
    loaded,
    sentences: pd.DataFrame,
    words: pd.DataFrame,
    out_h5: Path,
    out_units: Path,
    *,
    indexing: str,
    pooling: str,
    batch_size: int,
    storage_dtype: str,
    policy: str,
    device: str,
    disk_factor: float,
    attrs: dict,
) -> dict:
    """Extract one shard of sentences into ``out_h5`` (one dataset per layer) and ``out_units``."""
    if isinstance(loaded, ElmoModel):
        aligned, n_truncated, n_skipped = loaded.tokenize(sentences, words), 0, 0
        dim = loaded.dim
    else:
        aligned, n_truncated, n_skipped = tokenize_sentences(loaded, sentences, words, indexing=indexing, policy=policy)
        dim = loaded.model.config.hidden_size
    n_units = sum(len(item.units) for item in aligned)
    n_tokens = sum(len(item.input_ids) for item in aligned)
    needed = estimate_bytes(n_units, loaded.n_layers, dim, storage_dtype)
    log.info(
        "shard: %d sentences, %d model tokens, %d stored units; estimated output %.1f MB (%d layers x %d dims, %s)",
        len(aligned), n_tokens, n_units, needed / 1e6, loaded.n_layers, dim, storage_dtype,
    )
    log.info("over-long sentences (max %d tokens): %d truncated, %d skipped", loaded.max_length, n_truncated, n_skipped)
    check_disk(out_h5.parent, needed, disk_factor)
    offsets = np.zeros(len(aligned) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(item.units) for item in aligned])
    started = time.perf_counter()
    with atomic_path(out_h5) as tmp, h5py.File(tmp, "w") as out:
        datasets = [create_checked(out, layer_name(layer), (n_units, dim), storage_dtype) for layer in range(loaded.n_layers)]
        bar = tqdm(total=len(aligned), unit="sent", mininterval=5, desc=f"extract {loaded.key}")
        window, done_tokens = WINDOW_BATCHES * batch_size, 0
        for block_start in range(0, len(aligned), window):
            block = aligned[block_start:block_start + window]
            vectors = forward_block(loaded, block, batch_size, pooling, device)
            first, last = offsets[block_start], offsets[block_start + len(block)]
            if last > first:
                slab = np.concatenate(vectors, axis=1)  # (layers, units in block, dim)
                for layer, dataset in enumerate(datasets):
                    dataset[first:last] = slab[layer].astype(storage_dtype)
            bar.update(len(block))
            done_tokens += sum(len(item.input_ids) for item in block)
            bar.set_postfix(tokens_per_s=f"{done_tokens / (time.perf_counter() - started):.0f}")
        bar.close()
        create_checked(out, "sentence_offsets", offsets.shape, np.int64, data=offsets)
        sentence_ids = sentences["sentence_id"].to_numpy(dtype=np.int64)
        create_checked(out, "sentence_ids", sentence_ids.shape, np.int64, data=sentence_ids)
        out.attrs.update(attrs)
        out.attrs.update(
            {
                "n_layers": loaded.n_layers, "dim": dim, "dtype": storage_dtype, "indexing": indexing,
                "pooling": pooling, "max_length": loaded.max_length, "n_truncated_sentences": n_truncated,
                "n_skipped_sentences": n_skipped, "complete": 1,
            }
        )
    elapsed = time.perf_counter() - started
    units = pd.DataFrame(
        {
            "sentence_id": np.repeat([item.sentence_id for item in aligned], [len(item.units) for item in aligned]),
            "position": [p for item in aligned for p in range(len(item.units))],
            "unit": [unit for item in aligned for unit in item.units],
            "word_position": [w for item in aligned for w in item.word_positions],
            "is_punct": [p for item in aligned for p in item.unit_is_punct],
        }
    ).astype({"sentence_id": "int64", "position": "int32", "word_position": "int32", "is_punct": bool})
    with atomic_path(out_units) as tmp:
        units.to_parquet(tmp, index=False)
    stats = {"sentences": len(aligned), "tokens": n_tokens, "units": n_units, "seconds": elapsed,
             "tokens_per_s": n_tokens / elapsed if elapsed else float("nan"),
             "truncated": n_truncated, "skipped": n_skipped}
    log.info("done: %s", json.dumps(stats))
    return stats


def build_occurrences(
    units: pd.DataFrame, word_index: pd.DataFrame, indexing: str, min_occurrences: int, count: str,
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
        if count == "contexts":
            text_of = sentences.set_index("sentence_id")["text"]
            support = candidates.assign(text=candidates["sentence_id"].map(text_of)).groupby("word")["text"].nunique()
        else:
            support = candidates.groupby("word").size()
        kept = support.index[support >= min_occurrences]
        occurrences = candidates[candidates["word"].isin(kept)][["word", "row", "sentence_id", "position"]]
        # the threshold is on occurrences, as for words; after truncation a word may fall below it
    occurrences = occurrences.sort_values(["word", "row"], kind="stable").reset_index(drop=True)
    sizes = occurrences.groupby("word").size()
    return occurrences[occurrences["word"].isin(sizes.index[sizes >= 2])].reset_index(drop=True)


def package_versions() -> dict:
    import importlib.metadata

    names = ["torch", "transformers", "tokenizers", "h5py", "numpy", "spacy", "contextuality"]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def load_for_extraction(key: str, spec: dict, record: dict, model_dir: Path, device: str, compute_dtype: str):
    """A loaded HF model, or ELMo wrapped in the same interface, from the materialised folder ``model_dir``."""
    from contextuality import models

    if record["source"] == "elmo":
        from contextuality.elmo import ElmoEmbedder

        models.verify_weights(record, model_dir)
        stateful = spec.get("stateful", False)
        if stateful:
            log.warning("stateful ELMo: LSTM state is carried across sentences in corpus order within each "
                        "shard; use n_shards: 1 to reproduce the original single-embedder run exactly")
        options_path, weights_path = Path(model_dir) / models.ELMO_OPTIONS, Path(model_dir) / models.ELMO_WEIGHTS
        embedder = ElmoEmbedder(options_path, weights_path, device=device, stateful=stateful)
        options = json.loads(options_path.read_text())
        return ElmoModel(key, embedder, options["lstm"]["n_layers"] + 1, 2 * options["lstm"]["projection_dim"], stateful)
    return models.load(record, model_dir, spec, device, compute_dtype)


def run_extraction_job(
    *, model_key: str, spec: dict, extraction: dict, record_path: Path, model_dir: Path, sentences_path: Path, words_path: Path,
    shard: int, out_h5: Path, out_units: Path, threads: int, seed: int | None = None,
) -> dict:
    """Everything one shard job does: pick device, load the model, extract the shard's sentences."""
    import torch

    torch.set_num_threads(max(1, threads))
    record = json.loads(record_path.read_text())
    sentences = pd.read_parquet(sentences_path, columns=["sentence_id", "text"])
    batch_size = spec.get("batch_size") or extraction["batch_size"]
    first, last = shard_bounds(len(sentences), extraction["n_shards"], shard, WINDOW_BATCHES * batch_size)
    sentences = sentences.iloc[first:last]
    words = pd.read_parquet(words_path, columns=["sentence_id", "word", "char_start"])
    words = words[words["sentence_id"].between(sentences["sentence_id"].min(), sentences["sentence_id"].max())]
    device, lease = choose_device(
        extraction["device"], extraction.get("n_gpus", 0), shard, Path("resources") / ".gpu-leases"
    )
    log.info("model %s, shard %d/%d (sentences %d-%d) on %s", model_key, shard, extraction["n_shards"],
             first, last - 1, device)
    loaded = load_for_extraction(model_key, spec, record, model_dir, device, extraction.get("compute_dtype", "float32"))
    attrs = {
        "model": model_key, "source": record["source"],
        "revision": record.get("revision") or record.get("version") or record.get("weights_sha256", ""),
        "weights_sha256": record.get("weights_sha256", ""), "shard": shard,
        "seed": -1 if seed is None else seed,  # recorded for provenance; extraction itself draws nothing
        "n_shards": extraction["n_shards"], "device": device, "compute_dtype": extraction.get("compute_dtype", "float32"),
        "tokenizer": type(getattr(loaded, "tokenizer", None)).__name__ if not isinstance(loaded, ElmoModel) else "spacy",
        "versions": json.dumps(package_versions(), sort_keys=True),
    }
    try:
        return extract_shard(
            loaded, sentences, words, out_h5, out_units,
            indexing=spec.get("indexing", "word"), pooling=spec.get("pooling", "first"),
            batch_size=batch_size, storage_dtype=extraction["storage_dtype"],
            policy=extraction["max_length_policy"], device=device,
            disk_factor=extraction.get("min_free_disk_factor", 1.2), attrs=attrs,
        )
    finally:
        if lease is not None:
            lease.close()


def write_occurrences(
    units_path: Path, word_index_path: Path, sentences_path: Path, out_path: Path, *,
    indexing: str, min_occurrences: int, count: str,
) -> pd.DataFrame:
    units = pd.read_parquet(units_path)
    occurrences = build_occurrences(
        units, pd.read_parquet(word_index_path), indexing, min_occurrences, count,
        pd.read_parquet(sentences_path, columns=["sentence_id", "text"]),
    )
    log.info("%s indexing: %d words, %d occurrences (of %d stored units)", indexing,
             occurrences["word"].nunique(), len(occurrences), len(units))
    with atomic_path(out_path) as tmp:
        occurrences.to_parquet(tmp, index=False)
    return occurrences
