"""The forward passes of a shard's sentences, in windows of batches, and the rows of its units selected on the device.

The plan (``contextuality.extraction.plan``) says what each sentence feeds the model and which token range each
stored unit pools; ``hf_windows`` runs the model over it and hands each window's rows on (to the shard's writer,
``contextuality.extraction.extract``, or to the device measurement, ``contextuality.measure.device_job``):

* Sentences are processed in corpus order in windows of a few batches; inside a window they are
  sorted by length and right-padded per batch (with attention masks), so padding costs little. A batch
  holds at most ``batch_size`` sentences and, with ``max_batch_tokens``, at most that many padded tokens
  (a sentence longer than that runs alone), so one pass's hidden states have a bound whatever the lengths.
  Windows sit at fixed corpus positions and shards are cut between windows, so a sentence meets the
  same batch neighbours however many shards there are: gathered shards equal a one-shard run.
* The rows to store are gathered **on the device** with batched index operations (first or last
  piece; or the mean of a word's pieces through a padded index matrix, deterministic), cast to the
  storage dtype there, and only they cross to the host (pinned memory, non-blocking, on CUDA).

ELMo (``encoders.ElmoEncoder``) runs its own batches of spaCy words on the host.
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass

import numpy as np

from contextuality.core.settings import WINDOW_BATCHES
from contextuality.extraction.alignment import Plan
from contextuality.extraction.writer import DeviceBlock, HostBlock, block_extent

log = logging.getLogger(__name__)


class ExtractionError(RuntimeError):
    """Extraction cannot proceed (disk, plan, over-long sentence under policy 'error')."""


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


class _Stop(Exception):
    """Raised inside the model once the deepest hidden state a pass keeps is taken."""


def transformer_blocks(model, n_layers: int):
    """The model's blocks (the module list whose i-th member takes hidden state i as its input), or None.

    Hidden state i (i >= 1) is block i-1's output, block i's input; hidden state 0 is block 0's input (the
    embeddings). Found as the one ``ModuleList`` of n_layers - 1 members (BERT's ``encoder.layer``, GPT-2's
    ``h``, Llama's ``layers``).
    """
    import torch

    found = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers - 1]
    return found[0] if len(found) == 1 else None


def stop_after(loaded, last: int, forward):
    """A forward function giving hidden states 0..``last`` (as ``forward`` gives them), stopping the model
    after them: each taken as the input of its block (a forward pre-hook), the pass raised out of at block
    ``last``. The full ``forward`` when ``last`` is the final layer (transformers returns it after a pre-norm
    decoder's final norm, which no block's input holds) or when the blocks cannot be found."""
    blocks = transformer_blocks(loaded.model, loaded.n_layers)
    if last >= loaded.n_layers - 1 or blocks is None:
        return forward

    def early(ids, mask):
        states = {}

        def take(layer):
            def hook(module, args, kwargs):
                states[layer] = args[0] if args else kwargs["hidden_states"]
                if layer == last:
                    raise _Stop

            return hook

        handles = [blocks[layer].register_forward_pre_hook(take(layer), with_kwargs=True) for layer in range(last + 1)]
        try:
            loaded.model(input_ids=ids, attention_mask=mask)
        except _Stop:
            pass
        finally:
            for handle in handles:
                handle.remove()
        return [states[layer] for layer in range(last + 1)]

    return early


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
    """Yield (first unit row of the window, (layers, units, dim) block in the storage dtype, window end), the
    passes of ``loaded``, a Hugging Face model's encoder (``encoders.HuggingFaceEncoder``).

    ``forward(input_ids, attention_mask) -> hidden states`` defaults to the model's forward pass
    (the benchmark replaces it by a stand-in to measure everything but the model; the device measurement
    by one that stops after the deepest layer it keeps, ``stop_after``). ``layers``: the hidden states kept (default:
    every layer), in that order. ``to_host=False``: the block stays where the passes left it (a tensor
    on the device, handed back by calling the fourth value, ``release``, once its rows are taken), for
    measuring it there (``measure.device_job``); else a ``DeviceBlock`` or ``HostBlock`` for the writer.
    """
    import torch

    storage = getattr(torch, storage_dtype)
    on_cuda = str(device).startswith("cuda")
    forward = forward or model_forward(loaded)
    dim = loaded.width
    layers = list(range(loaded.n_layers)) if layers is None else list(layers)
    window = WINDOW_BATCHES * batch_size
    n_sentences = len(plan.sentence_ids)
    passes = _Passes(loaded, forward, pooling, device, on_cuda, storage, layers, batch_size, max_batch_tokens)
    # The windows' buffers: one handed back (``free``) is reused, else a new one is made. A buffer comes
    # back once the writer has written its rows (on CUDA once its copy to the host is queued: the device
    # runs copies in stream order). A writer that keeps up so reuses two or three; one that lags holds at
    # most ``extract.WRITER_DEPTH`` + 2 (queued, being written, being filled), as ``ShardWriter.put`` waits
    # while its queue is full. Fresh memory costs a page fault per page on first touch.
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
        filled = passes.fill(plan, w0, w1, base, rows_of_window)
        if filled != n_rows:
            raise ExtractionError(f"window of sentences {w0}-{w1 - 1}: {filled} rows computed, {n_rows} planned")
        if not to_host:
            yield base, rows_of_window, w1, lambda b=buffer: free.put(b)
        else:
            yield base, _for_writer(rows_of_window, buffer, free, on_cuda), w1


@dataclass
class _Passes:
    """What every forward pass of ``hf_windows`` shares, and the buffers it reuses from batch to batch and layer
    to layer (fresh tensors cost page faults): the token grid in the storage dtype (``cast``), and the batch's
    rows of units gathered from it (``gathered``)."""

    loaded: object
    forward: object
    pooling: str
    device: str
    on_cuda: bool
    storage: object
    layers: list[int]
    batch_size: int
    max_batch_tokens: int | None
    cast: object = None
    gathered: object = None

    def fill(self, plan: Plan, w0: int, w1: int, base: int, rows_of_window) -> int:
        """The forward passes of plan sentences ``[w0, w1)`` (one window): their units' rows into
        ``rows_of_window`` (corpus order, its first row the plan's unit row ``base``). Returns the rows computed."""
        import torch

        device, filled = self.device, 0
        tokenizer = self.loaded.tokenizer
        for batch, ids, mask in padded_batches(plan, w0, w1, self.batch_size, tokenizer, self.max_batch_tokens):
            rows, index, n_pieces = _selection(plan, batch, ids.shape[1], self.pooling)
            if not len(rows):
                continue
            filled += len(rows)
            with torch.inference_mode():
                hidden = self.forward(
                    torch.from_numpy(ids).to(device, non_blocking=True),
                    torch.from_numpy(mask).to(device, non_blocking=True),
                )
                index_t = torch.from_numpy(index).to(device, non_blocking=True)
                positions = rows - base
                if self.on_cuda:
                    positions = torch.from_numpy(positions).to(device, non_blocking=True)
                counts = None if n_pieces is None else torch.from_numpy(n_pieces).to(device, dtype=torch.float32)
                self.cast, self.gathered = _select_into(hidden, rows_of_window, positions, index_t, counts,
                                                        self.storage, self.cast, self.gathered, self.layers)  # fmt: skip
        return filled


def _for_writer(rows_of_window, buffer, free: queue.SimpleQueue, on_cuda: bool):
    """A window's rows for the writer, with its finiteness check's bounds reduced here. On CUDA: a ``DeviceBlock``,
    the rows copied to pinned host memory without blocking (``buffer`` goes back to ``free`` at once, the device
    runs copies in stream order); else a ``HostBlock`` that hands ``buffer`` back once written."""
    import torch

    if on_cuda:  # to pinned host memory without blocking
        storage, (n_layers, n_rows, dim) = rows_of_window.dtype, rows_of_window.shape
        host = torch.empty((n_layers, n_rows, dim), dtype=storage, pin_memory=True)
        host.copy_(rows_of_window, non_blocking=True)
        bounds = torch.zeros(2, dtype=storage, pin_memory=True)  # the writer's finiteness check, reduced here
        if n_rows:
            bounds.copy_(torch.stack(torch.aminmax(rows_of_window)), non_blocking=True)
        free.put(buffer)
        done = torch.cuda.Event()
        done.record()
        return DeviceBlock(host, done, bounds)
    # the writer's finiteness check, reduced here with the forward passes' threads (see HostBlock)
    return HostBlock(rows_of_window, release=lambda b=buffer: free.put(b), bounds=block_extent(rows_of_window))


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
