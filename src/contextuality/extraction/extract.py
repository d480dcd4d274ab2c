"""Run a shard of sentences through a model and store every layer's vector of every planned unit.

The plan (``contextuality.extraction.plan``, rule ``plan``) says what each sentence feeds the model and
which token range each stored unit pools. Extraction only runs the model and keeps those rows:

* Sentences are processed in corpus order in windows of a few batches; inside a window they are
  sorted by length and right-padded per batch (with attention masks), so padding costs little. A batch
  holds at most ``batch_size`` sentences and, with ``max_batch_tokens``, at most that many padded tokens
  (a sentence longer than that runs alone), so one pass's hidden states have a bound whatever the lengths.
  Windows sit at fixed corpus positions and shards are cut between windows, so a sentence meets the
  same batch neighbours however many shards there are: gathered shards equal a one-shard run.
* The rows to store are gathered **on the device** with batched index operations (first or last
  piece; or the mean of a word's pieces through a padded index matrix, deterministic), cast to the
  storage dtype there, and only they cross to the host (pinned memory, non-blocking, on CUDA).
* HDF5 writes happen in a background thread (``contextuality.extraction.writer``) while the next batches run,
  each window's rows checked finite first (``finite``).

Special tokens go through the model but are never stored. Layer 0 is the input-embedding layer.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from contextuality.core import diskspace
from contextuality.core.atomic import atomic_path
from contextuality.core.runtime import tell_terminal
from contextuality.core.settings import WINDOW_BATCHES, ShardSettings, shard_bounds, stored_params
from contextuality.extraction.alignment import Plan
from contextuality.extraction.devices import choose_device, describe
from contextuality.extraction.finite import finite_check
from contextuality.extraction.heap import keep_freed_memory
from contextuality.extraction.plan import read_plan
from contextuality.extraction.writer import DeviceBlock, HostBlock, ShardWriter, block_extent, chunk_cache_bytes
from contextuality.store.files import create_checked

log = logging.getLogger(__name__)

WRITER_DEPTH = 4  # windows queued for the writer before the forward passes wait


class ExtractionError(RuntimeError):
    """Extraction cannot proceed (disk, plan, over-long sentence under policy 'error')."""


def estimate_bytes(n_units: int, n_layers: int, dim: int, storage_dtype: str) -> int:
    return n_units * n_layers * dim * np.dtype(storage_dtype).itemsize


# --------------------------------------------------------------------------------------------------
# Models behind one interface: a Hugging Face model, or ELMo reading spaCy words


@dataclass
class ElmoModel:
    """ELMo behind the same interface as a Hugging Face model: units are spaCy words."""

    key: str
    embedder: object
    n_layers: int
    dim: int
    stateful: bool = False
    max_length: int = 10_000  # a character-CNN + LSTM has no position limit

    def forward_block(
        self, sentences: list[list[str]], batch_size: int, max_tokens: int | None = None, names=None
    ) -> list[np.ndarray]:
        """Per sentence (layers, words, dim) float32; stateful ELMo keeps corpus order (its state flows on).
        ``max_tokens`` caps the padded words per batch (``length_batches``); ``names``: the sentences' ids."""
        lengths = np.array([len(sentence) for sentence in sentences], dtype=np.int64)
        order = np.arange(len(sentences)) if self.stateful else np.argsort(lengths, kind="stable")
        names = np.arange(len(sentences)) if names is None else np.asarray(names)
        results: list[np.ndarray | None] = [None] * len(sentences)
        for indices in length_batches(order, lengths[order], batch_size, max_tokens, names[order]):
            for index, array in zip(indices, self.embedder.embed_batch([sentences[i] for i in indices])):
                results[index] = np.asarray(array, dtype=np.float32)
        return results


def load_for_extraction(key: str, settings: ShardSettings, record: dict, model_dir: Path, device: str):
    """A loaded HF model, or ELMo wrapped in the same interface, from the materialised folder ``model_dir``."""
    from contextuality.models import loading
    from contextuality.models.sources import SOURCES

    if not SOURCES[record["source"]].hf_folder:  # ELMo's own files
        from contextuality.models.elmo import ElmoEmbedder

        loading.verify_model_files(record, model_dir)
        stateful = settings.stateful
        if stateful:
            log.warning(
                "stateful ELMo: LSTM state is carried across sentences in corpus order within each "
                "shard; models.%s.n_shards: 1 reproduces the original single-embedder run exactly",
                key,
            )
        options_path, weights_path = Path(model_dir) / loading.ELMO_OPTIONS, Path(model_dir) / loading.ELMO_WEIGHTS
        embedder = ElmoEmbedder(options_path, weights_path, device=device, stateful=stateful)
        options = json.loads(options_path.read_text())
        return ElmoModel(
            key, embedder, options["lstm"]["n_layers"] + 1, 2 * options["lstm"]["projection_dim"], stateful
        )
    return loading.load(
        record,
        model_dir,
        device,
        settings.compute_dtype,
        max_length=settings.max_length,
        allow_pickle=settings.allow_pickle,
    )


# --------------------------------------------------------------------------------------------------
# Forward passes, selection on the device


def _selection(
    plan: Plan, batch: np.ndarray, width: int, pooling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For a batch (plan sentence positions): the window-slab rows of its units, and their flat token indices.

    ``first``/``last``/single pieces: one index per unit into the (batch x width) token grid. ``mean``:
    an (units, pieces) matrix padded with the index of an extra zero row, and the piece counts.
    """
    starts, ends = plan.unit_offsets[batch], plan.unit_offsets[batch + 1]
    counts = ends - starts
    rows = np.repeat(starts, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    row_in_batch = np.repeat(np.arange(len(batch)), counts)
    first = plan.units["token_first"].to_numpy()[rows].astype(np.int64)
    last = plan.units["token_last"].to_numpy()[rows].astype(np.int64)
    if pooling == "last":
        return rows, row_in_batch * width + last, None
    if pooling == "first" or np.all(first == last):
        return rows, row_in_batch * width + first, None
    n_pieces = last - first + 1
    span = np.arange(int(n_pieces.max()))
    index = row_in_batch[:, None] * width + first[:, None] + span[None, :]
    pad = len(batch) * width  # the zero row appended after the token grid
    return rows, np.where(span[None, :] < n_pieces[:, None], index, pad), n_pieces


def length_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, max_tokens: int | None, names: np.ndarray):
    """``order`` (sentences in the order they run; ``lengths`` theirs) cut into consecutive batches of at most
    ``batch_size`` sentences and, with ``max_tokens``, at most ``max_tokens`` padded tokens (sentences x the
    batch's longest): a batch closes before the sentence that would take it past either bound. A sentence
    longer than ``max_tokens`` runs alone, with a warning naming it (``names``: the sentences' ids).

    Greedy in run order, so the batches depend only on the window's sentences (never on the shard count).
    """
    start, width = 0, 0
    for i, n in enumerate(lengths.tolist()):
        wider = max(width, n)
        if i > start and (i - start == batch_size or (max_tokens is not None and (i - start + 1) * wider > max_tokens)):
            yield order[start:i]
            start, wider = i, n
        width = wider
        if max_tokens is not None and n > max_tokens:
            log.warning(
                "sentence %s has %d tokens, more than extraction.max_batch_tokens (%d): it runs alone, and "
                "its forward pass holds %d tokens",
                names[i],
                n,
                max_tokens,
                n,
            )
    if start < len(order):
        yield order[start:]


def padded_batches(plan: Plan, first: int, last: int, batch_size: int, tokenizer, max_tokens: int | None = None):
    """The batches of plan sentences ``[first, last)`` (one window): sorted by length, right-padded, each of
    at most ``batch_size`` sentences and ``max_tokens`` padded tokens (``length_batches``).

    Yields (sentence positions, input ids, attention mask) as numpy arrays, padded on the right with
    the tokenizer's pad token (as ``tokenizer.pad`` does, but by array indexing), so real tokens keep
    positions 0..n-1. Sentences without tokens (an empty sentence for a decoder without BOS) are not run.
    """
    lengths = np.diff(plan.token_offsets)
    span = np.arange(first, last)
    order = span[np.argsort(lengths[span], kind="stable")]
    order = order[lengths[order] > 0]
    pad = tokenizer.pad_token_id
    if pad is None:
        raise ExtractionError(f"tokenizer {type(tokenizer).__name__} has no pad token to pad batches with")
    for batch in length_batches(order, lengths[order], batch_size, max_tokens, plan.sentence_ids[order]):
        n = lengths[batch]
        real = np.arange(int(n.max()))[None, :] < n[:, None]
        ids = np.full(real.shape, pad, dtype=np.int64)
        ids[real] = plan.input_ids[(plan.token_offsets[batch][:, None] + np.arange(real.shape[1])[None, :])[real]]
        yield batch, ids, real.astype(np.int64)


def model_forward(loaded):
    """The forward pass extraction runs: every layer's hidden states (input embeddings first)."""

    def forward(ids, mask):
        return loaded.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states

    return forward


def hf_windows(
    loaded,
    plan: Plan,
    *,
    batch_size: int,
    max_batch_tokens: int | None,
    pooling: str,
    device: str,
    storage_dtype: str,
    forward=None,
    layers=None,
    to_host: bool = True,
):
    """Yield (first unit row of the window, (layers, units, dim) block in the storage dtype, window end).

    ``forward(input_ids, attention_mask) -> hidden states`` defaults to the model's forward pass
    (the benchmark replaces it by a stand-in to measure everything but the model; the device measurement
    by one that stops after the deepest layer it keeps). ``layers``: the hidden states kept (default:
    every layer), in that order. ``to_host=False``: the block stays where the passes left it (a tensor
    on the device, handed back by calling the fourth value, ``release``, once its rows are taken), for
    measuring it there (``measure.device_job``); else a ``DeviceBlock`` or ``HostBlock`` for the writer.
    """
    import torch

    storage = getattr(torch, storage_dtype)
    on_cuda = str(device).startswith("cuda")
    forward = forward or model_forward(loaded)
    dim = loaded.model.config.hidden_size
    layers = list(range(loaded.n_layers)) if layers is None else list(layers)
    window = WINDOW_BATCHES * batch_size
    n_sentences = len(plan.sentence_ids)
    # reused per batch and layer (fresh tensors cost page faults): the token grid in the storage dtype,
    # and the batch's rows of units gathered from it
    cast, gathered = None, None
    # The windows' buffers: one handed back (``free``) is reused, else a new one is made. A buffer comes
    # back once the writer has written its rows (on CUDA once its copy to the host is queued: the device
    # runs copies in stream order). A writer that keeps up so reuses two or three; one that lags holds at
    # most WRITER_DEPTH + 2 (queued, being written, being filled), as ``ShardWriter.put`` waits while its
    # queue is full. Fresh memory costs a page fault per page on first touch.
    free: queue.SimpleQueue = queue.SimpleQueue()
    starts = np.arange(0, n_sentences, window)
    widest = int(np.diff(plan.unit_offsets[np.append(starts, n_sentences)]).max(initial=0))
    for w0 in starts:
        w0 = int(w0)
        w1 = min(w0 + window, n_sentences)
        base, n_rows = int(plan.unit_offsets[w0]), int(plan.unit_offsets[w1] - plan.unit_offsets[w0])
        try:
            buffer = free.get_nowait()
        except queue.Empty:
            buffer = torch.empty(len(layers) * widest * dim, dtype=storage, device=device)
        rows_of_window = front_view(buffer, (len(layers), n_rows, dim))  # in corpus order
        filled = 0
        for batch, ids, mask in padded_batches(plan, w0, w1, batch_size, loaded.tokenizer, max_batch_tokens):
            rows, index, n_pieces = _selection(plan, batch, ids.shape[1], pooling)
            if not len(rows):
                continue
            filled += len(rows)
            with torch.inference_mode():
                hidden = forward(
                    torch.from_numpy(ids).to(device, non_blocking=True),
                    torch.from_numpy(mask).to(device, non_blocking=True),
                )
                index_t = torch.from_numpy(index).to(device, non_blocking=True)
                positions = rows - base
                if on_cuda:
                    positions = torch.from_numpy(positions).to(device, non_blocking=True)
                counts = None if n_pieces is None else torch.from_numpy(n_pieces).to(device, dtype=torch.float32)
                cast, gathered = _select_into(hidden, rows_of_window, positions, index_t, counts, storage, cast, gathered,
                                              layers)  # fmt: skip
        if filled != n_rows:
            raise ExtractionError(f"window of sentences {w0}-{w1 - 1}: {filled} rows computed, {n_rows} planned")
        if not to_host:
            yield base, rows_of_window, w1, lambda b=buffer: free.put(b)
        elif on_cuda:  # to pinned host memory without blocking
            host = torch.empty((len(layers), n_rows, dim), dtype=storage, pin_memory=True)
            host.copy_(rows_of_window, non_blocking=True)
            bounds = torch.zeros(2, dtype=storage, pin_memory=True)  # the writer's finiteness check, reduced here
            if n_rows:
                bounds.copy_(torch.stack(torch.aminmax(rows_of_window)), non_blocking=True)
            free.put(buffer)
            done = torch.cuda.Event()
            done.record()
            yield base, DeviceBlock(host, done, bounds), w1
        else:
            # the writer's finiteness check, reduced here with the forward passes' threads (see HostBlock)
            yield (
                base,
                HostBlock(rows_of_window, release=lambda b=buffer: free.put(b), bounds=block_extent(rows_of_window)),
                w1,
            )


def _select_into(hidden, rows_of_window, positions, index, counts, storage, cast, gathered, layers):
    """Each kept layer's rows of the batch's units (pooled as planned), in the storage dtype, into the window's
    buffer at their corpus-order ``positions`` (a tensor on the device, or a numpy array when the device
    is the CPU). ``cast`` and ``gathered``: reusable buffers in the storage dtype (returned, maybe grown).
    ``layers``: the hidden states kept, slot by slot of the buffer."""
    import torch

    shape = (len(positions), rows_of_window.shape[-1])
    gathered = _holding(gathered, shape, storage, rows_of_window.device)
    rows = front_view(gathered, shape)
    for slot, layer in enumerate(layers):
        states = hidden[layer]
        flat = states.reshape(-1, states.shape[-1])
        if counts is not None:  # mean of a word's pieces: padded gather (a zero row after the grid)
            padded = torch.cat([flat.float(), flat.new_zeros((1, flat.shape[1]), dtype=torch.float32)])
            rows.copy_(padded[index].sum(dim=1) / counts[:, None])
        else:
            if flat.dtype != storage:  # cast the batch's token grid (small enough to stay in cache) first
                cast = _holding(cast, flat.shape, storage, flat.device)
                flat = front_view(cast, flat.shape).copy_(flat)
            torch.index_select(flat, 0, index, out=rows)
        if isinstance(positions, np.ndarray):  # numpy puts whole rows in place, torch's CPU scatter is 6x slower
            rows_of_window[slot].numpy()[positions] = rows.numpy()
        else:
            rows_of_window[slot].index_copy_(0, positions, rows)
    return cast, gathered


def front_view(buffer, shape: tuple[int, ...]):
    """The first prod(shape) elements of a flat, reused tensor, as a contiguous tensor of ``shape``."""
    return buffer[: int(np.prod(shape))].view(shape)


def _holding(buffer, shape: tuple[int, ...], dtype, device):
    """``buffer`` (a flat tensor, or None) if it holds ``shape``'s elements, else a new one of at least 1M."""
    import torch

    needed = int(np.prod(shape))
    if buffer is not None and buffer.numel() >= needed:
        return buffer
    return torch.empty(max(needed, 1 << 20), dtype=dtype, device=device)


def elmo_windows(loaded: ElmoModel, plan: Plan, *, batch_size: int, max_batch_tokens: int | None, storage_dtype: str):
    import torch

    words = plan.units["unit"].tolist()
    window = WINDOW_BATCHES * batch_size
    n_sentences = len(plan.sentence_ids)
    for w0 in range(0, n_sentences, window):
        w1 = min(w0 + window, n_sentences)
        sentences = [words[plan.unit_offsets[i] : plan.unit_offsets[i + 1]] for i in range(w0, w1)]
        arrays = loaded.forward_block(sentences, batch_size, max_batch_tokens, plan.sentence_ids[w0:w1])
        arrays = [a for a in arrays if a is not None and a.shape[1]]
        block = (
            np.concatenate(arrays, axis=1).astype(storage_dtype)
            if arrays
            else np.zeros((loaded.n_layers, 0, loaded.dim), storage_dtype)
        )
        yield int(plan.unit_offsets[w0]), HostBlock(torch.from_numpy(block), bounds=block_extent(block)), w1


def extract_shard(
    loaded,
    plan: Plan,
    out_h5: Path,
    *,
    pooling: str,
    batch_size: int,
    storage_dtype: str,
    device: str,
    disk_factor: float,
    attrs: dict,
    forward=None,
    max_batch_tokens: int | None = None,
) -> dict:
    """Extract the plan's sentences into ``out_h5`` (one dataset per layer, rows in plan order); a forward pass
    takes at most ``batch_size`` sentences and ``max_batch_tokens`` padded tokens (None: no cap)."""
    n_units = len(plan.units)
    dim = loaded.dim if isinstance(loaded, ElmoModel) else loaded.model.config.hidden_size
    needed = estimate_bytes(n_units, loaded.n_layers, dim, storage_dtype)
    log.info(
        "shard: %d sentences, %d model tokens, %d stored units; output %.1f MB (%d layers x %d dims, %s)",
        len(plan.sentence_ids),
        plan.n_tokens,
        n_units,
        needed / 1e6,
        loaded.n_layers,
        dim,
        storage_dtype,
    )
    log.info(
        "over-long sentences (max %d tokens): %d truncated, %d skipped",
        loaded.max_length,
        int(plan.truncated.sum()),
        int(plan.skipped.sum()),
    )
    if isinstance(loaded, ElmoModel):
        windows = elmo_windows(
            loaded, plan, batch_size=batch_size, max_batch_tokens=max_batch_tokens, storage_dtype=storage_dtype
        )
    else:
        windows = hf_windows(
            loaded,
            plan,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            pooling=pooling,
            device=device,
            storage_dtype=storage_dtype,
            forward=forward,
        )
    started, done = time.perf_counter(), 0
    bar = tqdm(total=len(plan.sentence_ids), unit="sent", mininterval=5, desc=f"extract {loaded.key}")
    cache = chunk_cache_bytes(n_units, dim, storage_dtype)
    with (
        diskspace.reserve(out_h5, needed, disk_factor, ways=diskspace.ways_out(storage_dtype)),
        atomic_path(out_h5) as tmp,
        h5py.File(tmp, "w", rdcc_nbytes=cache, rdcc_nslots=1009) as out,
    ):
        check = finite_check(plan, out_h5, loaded.key, attrs.get("shard", 0), storage_dtype)
        writer = ShardWriter(out, out_h5, loaded.n_layers, n_units, dim, storage_dtype, depth=WRITER_DEPTH, check=check)
        try:
            expected = 0
            for base, block, window_end in windows:
                if base != expected:
                    raise ExtractionError(f"{out_h5}: a window starts at row {base}, expected {expected}")
                writer.put(block)
                expected += _rows(block)
                bar.update(window_end - done)
                done = window_end
                bar.set_postfix(
                    tokens_per_s=f"{plan.token_offsets[done] / max(time.perf_counter() - started, 1e-9):.0f}"
                )
        finally:
            writer.close()
        bar.close()
        create_checked(out, "sentence_offsets", plan.unit_offsets.shape, np.int64, data=plan.unit_offsets)
        create_checked(out, "sentence_ids", plan.sentence_ids.shape, np.int64, data=plan.sentence_ids)
        out.attrs.update(attrs)
        out.attrs.update(
            {
                "n_layers": loaded.n_layers,
                "dim": dim,
                "dtype": storage_dtype,
                "pooling": pooling,
                "max_length": loaded.max_length,
                "n_truncated_sentences": int(plan.truncated.sum()),
                "n_skipped_sentences": int(plan.skipped.sum()),
                "first_row": plan.first_row,
                "complete": 1,
            }
        )
    elapsed = time.perf_counter() - started
    stats = {
        "sentences": len(plan.sentence_ids),
        "tokens": plan.n_tokens,
        "units": n_units,
        "seconds": elapsed,
        "tokens_per_s": plan.n_tokens / elapsed if elapsed else float("nan"),
        "truncated": int(plan.truncated.sum()),
        "skipped": int(plan.skipped.sum()),
    }
    log.info("done: %s", json.dumps(stats))
    return stats


def _rows(block) -> int:
    return block.shape[1]


# --------------------------------------------------------------------------------------------------
# The workflow's jobs


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


def run_extraction_job(
    *,
    model_key: str,
    settings: ShardSettings,
    record_path: Path,
    model_dir: Path,
    tokens_path: Path,
    units_path: Path,
    shard: int,
    out_h5: Path,
    threads: int,
    disk_factor: float,
    gpus: int,
    seed: int,
) -> dict:
    """Everything one shard job does: pick device, load the model, extract the shard's planned sentences.

    ``seed`` is recorded for provenance only (extraction draws nothing); ``disk_factor`` is
    ``extraction.min_free_disk_factor``. Neither changes the stored vectors.
    """
    import pyarrow.parquet as pq
    import torch

    from contextuality.models import loading
    from contextuality.store import provenance

    keep_freed_memory()  # no page faults anew in every forward pass (extraction.heap)
    torch.set_num_threads(max(1, threads))
    record = json.loads(record_path.read_text())
    n_sentences = pq.ParquetFile(tokens_path).metadata.num_rows
    first, last = shard_bounds(n_sentences, settings.n_shards, shard, WINDOW_BATCHES * settings.batch_size)
    plan = read_plan(tokens_path, units_path, first, last)
    device, lease = choose_device(
        settings.device, gpus, shard, Path("resources") / ".gpu-leases", compute_dtype=settings.compute_dtype
    )
    tell_terminal(f"{model_key}: shard {shard} of {settings.n_shards} (sentences {first}-{last - 1}) extracted on "
                  f"{describe(device)}")  # fmt: skip
    loaded = load_for_extraction(model_key, settings, record, model_dir, device)
    attrs = {
        "model": model_key,
        "source": record["source"],
        "revision": record.get("revision") or record.get("version") or record.get("weights_sha256", ""),
        "weights_sha256": record.get("weights_sha256", ""),
        "shard": shard,
        "seed": seed,
        "n_shards": settings.n_shards,
        "device": device,
        "compute_dtype": settings.compute_dtype,
        "tokenizer": type(getattr(loaded, "tokenizer", None)).__name__
        if not isinstance(loaded, ElmoModel)
        else "spacy",
        "indexing": settings.indexing,
        "tokenization": settings.tokenization,
        # the last hidden state of a pre-norm decoder has passed its final norm; the others have not
        "final_norm": "" if isinstance(loaded, ElmoModel) else loading.final_norm(loaded.model),
        "versions": json.dumps(package_versions(), sort_keys=True),
        # what every shard of the model must share, checked by the manifest and every reader
        "provenance": provenance.encode(
            provenance.shard_provenance(model_key, stored_params(settings), record_path, tokens_path, units_path)
        ),
    }
    try:
        return extract_shard(
            loaded,
            plan,
            out_h5,
            pooling=settings.pooling,
            batch_size=settings.batch_size,
            max_batch_tokens=settings.max_batch_tokens,
            storage_dtype=settings.storage_dtype,
            device=device,
            disk_factor=disk_factor,
            attrs=attrs,
        )
    finally:
        if lease is not None:
            lease.close()
