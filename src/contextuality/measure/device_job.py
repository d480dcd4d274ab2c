"""Every layer measured where the forward passes leave it: the device job (rule ``measure_model``).

The job runs the plan's forward passes itself, exactly as extraction runs them (``windows.hf_windows``:
the same windows, batches, pooling and cast to ``extraction.storage_dtype``, on the device), keeps the rows
of a **group of layers** resident on the device for one pass over the corpus, and measures each layer of
the group there with the one measurement path (``layer_job.measure_rows`` on torch's arrays), so no vector
goes to a disk. A model whose layers do not all fit is measured in groups (``plan_groups``), sized at run
time from the device's free memory and ``metrics.device_memory_fraction`` (on torch's CPU backend, from the
memory the job was given, its ``mem_mb``: ``device_plan``); a group's pass stops after its
deepest layer (``stop_after``). The per-layer files are those ``measure_layer`` writes, packed into one tar
per part (the layer count is known only once the model is built), beside a record of what the rows were
made from (``DEVICE_RECORD``: the manifest's provenance, rows, dims and layers). docs/scaling.md gives
the memory and pass arithmetic.

Reproducible: every seeded draw is made on the host from the plan (``measure_rows``), the device's
reductions are deterministic (``torch.use_deterministic_algorithms``), and the groups change no bytes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from contextuality.core import layout
from contextuality.core.archive import pack
from contextuality.core.atomic import atomic_path
from contextuality.core.settings import WINDOW_BATCHES, MeasureSettings, ShardSettings, stored_params
from contextuality.measure.device.parts import Resume, device_record, part_layers, resume_key, rows_provenance
from contextuality.measure.device.plan import (
    GPU_BLOCK_ROWS,
    MB,
    GroupPlan,
    free_device_bytes,
    held_bytes,
    plan_groups,
    reserve_bytes,
    usable_fraction,
)
from contextuality.measure.engine import backend
from contextuality.measure.engine.layer_pass import BLOCK_ROWS
from contextuality.measure.engine.layer_rows import OccurrenceIndex, RowsInMemory
from contextuality.measure.engine.streaming import BASE_MB
from contextuality.measure.layer_job import measure_rows_then, read_units
from contextuality.measure.layer_result import write_layer_results
from contextuality.measure.similarity.sample import SampleRequest

LOG = logging.getLogger(__name__)

# How the device job's errors end: the rows came from this job's own forward passes.
NON_FINITE_REMEDY = (
    "the model produced them in this job's forward passes: check its weights, or compute in float32 "
    "(extraction.compute_dtype: float32; half precision overflows)"
)


# --------------------------------------------------------------------------------------------------
# Forward passes that stop after the deepest layer a group keeps


class _Stop(Exception):
    """Raised inside the model once the group's deepest hidden state is taken."""


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


# --------------------------------------------------------------------------------------------------
# The job


def deterministic(device: str) -> None:
    """Deterministic reductions on the device: the same rows give the same bytes, run after run."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic workspace
    torch.use_deterministic_algorithms(True, warn_only=True)
    if str(device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def fill_group(loaded, plan, group: list[int], resident, shard: ShardSettings, device: str, desc: str) -> None:
    """One pass over the corpus: the group's rows of every sentence into ``resident`` (group, rows, dim). A stateful
    ELMo starts each pass from the state extraction's one pass starts from (zero), not from the previous pass's."""
    from contextuality.extraction import extract
    from contextuality.extraction import windows as passes

    if isinstance(loaded, extract.ElmoModel):
        loaded.embedder.reset_states()
        windows = ((base, block.rows[group], end, lambda: None) for base, block, end in passes.elmo_windows(
            loaded, plan, batch_size=shard.batch_size, max_batch_tokens=shard.max_batch_tokens,
            storage_dtype=shard.storage_dtype))  # fmt: skip
    else:
        forward = stop_after(loaded, max(group), passes.model_forward(loaded))
        windows = passes.hf_windows(
            loaded, plan, batch_size=shard.batch_size, max_batch_tokens=shard.max_batch_tokens, pooling=shard.pooling,
            device=device, storage_dtype=shard.storage_dtype, forward=forward, layers=group, to_host=False,
        )  # fmt: skip
    n_sentences = len(plan.sentence_ids)
    with tqdm(total=n_sentences, unit="sent", mininterval=5, desc=desc) as bar:
        done = 0
        for base, block, end, release in windows:
            resident[:, base : base + block.shape[1]].copy_(block, non_blocking=True)
            release()
            bar.update(end - done)
            done = end


def batch_tokens(plan, shard: ShardSettings) -> int:
    """The most padded tokens of one forward pass over this plan: ``batch_size`` of its longest sentence, or
    ``max_batch_tokens`` (a longer sentence alone)."""
    longest = int(np.diff(plan.token_offsets).max(initial=1))
    tokens = shard.batch_size * longest
    return tokens if shard.max_batch_tokens is None else min(tokens, max(shard.max_batch_tokens, longest))


def job_reserve(plans: list, shard: ShardSettings, *, d: int, n_layers: int, on_cuda: bool,
                layer_measures: bool = True) -> int:  # fmt: skip
    """What a job that runs the forward passes of ``plans`` keeps beside its resident layers (``reserve_bytes``: its
    largest pass, its widest window, and with ``layer_measures`` the layer measurement's work), and on torch's CPU
    backend its own part beside the layers (interpreter, index, units, samples)."""
    window = WINDOW_BATCHES * shard.batch_size
    widest, tokens = 0, 1
    for plan in plans:
        starts = np.arange(0, len(plan.sentence_ids), window)
        widest = max(widest, int(np.diff(plan.unit_offsets[np.append(starts, len(plan.sentence_ids))]).max(initial=0)))
        tokens = max(tokens, batch_tokens(plan, shard))
    reserve = reserve_bytes(d=d, n_layers=n_layers, batch_tokens=tokens, widest_window=widest,
                            itemsize=backend.itemsize(shard.storage_dtype), on_cuda=on_cuda,
                            layer_measures=layer_measures)  # fmt: skip
    return reserve + (0 if on_cuda else BASE_MB * MB)


def measure_model(
    *,
    model_key: str,
    shard: ShardSettings,
    measure: MeasureSettings,
    device: str,
    memory_fraction: float,
    job_memory_mb: int,
    parts: int,
    part: int,
    record_path: Path,
    model_dir: Path,
    tokens_path: Path,
    units_path: Path,
    occurrences_path: Path,
    out_folder: Path,
    provenance: dict,
    host_threads: int = 1,
    sample: SampleRequest | None = None,
    resume: Resume | None = None,
    loaded=None,
    log: logging.Logger = LOG,
) -> dict:
    """Measure part ``part`` of ``parts`` of the layers of ``model_key`` on ``device`` (but those ``resume`` kept
    from an earlier job of the part), writing each layer's record, words table and PC vectors into ``out_folder``
    (the layout's per-layer names, relative to the model's metrics folder) with ``provenance``'s digest; on torch's
    CPU backend its groups planned in ``job_memory_mb`` (the job's mem_mb); ``host_threads`` finish layers on the host at once;
    with ``sample``, each layer's similarity sample gathered from its resident rows into ``sample.out``.
    Returns the job's figures (its layers, groups, seconds, peak device memory) and the model's shape (``loaded``:
    the model already loaded, ``contextuality.study``'s; else loaded from ``model_dir``)."""
    import torch

    from contextuality.extraction.extract import ElmoModel, load_for_extraction
    from contextuality.extraction.plan import read_plan
    from contextuality.models.loading import final_norm
    from contextuality.store import provenance as provenance_module

    deterministic(device)
    started = time.perf_counter()
    record = json.loads(Path(record_path).read_text())
    plan = read_plan(tokens_path, units_path)
    loaded = load_for_extraction(model_key, shard, record, model_dir, device) if loaded is None else loaded
    index = OccurrenceIndex.from_parquet(occurrences_path)
    units = read_units(units_path) if measure.geometry else None
    n_rows = len(plan.units)
    elmo = isinstance(loaded, ElmoModel)
    d = model_dim(loaded)
    layers = part_layers(loaded.n_layers, parts, part)
    todo, kept = _left_to_measure(layers, resume, sample)
    itemsize = backend.itemsize(shard.storage_dtype)
    on_cuda = str(device).startswith("cuda")
    reserve = job_reserve([plan], shard, d=d, n_layers=loaded.n_layers, on_cuda=on_cuda)
    free = free_device_bytes(device, job_memory_mb, held_bytes(int(record.get("weights_bytes", 0))))
    fraction, layer_bytes = usable_fraction(device, memory_fraction), n_rows * d * itemsize
    groups = (plan_groups(todo, layer_bytes, free, fraction, reserve, None if on_cuda else job_memory_mb)
              if todo else GroupPlan([], layer_bytes, 0, 0, reserve))  # fmt: skip
    log.info("%s on %s: %d rows x %d dims, layers %s of %d%s; %s", model_key, device, n_rows, d,
             f"{layers[0]}-{layers[-1]}" if layers else "none", loaded.n_layers,
             f" ({kept} kept from an earlier job of this part)" if kept else "",
             groups.describe(loaded.n_layers) if todo else "nothing to measure")  # fmt: skip
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    seconds = _measure_groups(
        groups.groups, loaded=loaded, plan=plan, shard=shard, measure=measure, index=index, units=units,
        device=device, out_folder=out_folder, digest=provenance_module.digest(provenance), host_threads=host_threads,
        model_key=model_key, log=log, sample=sample, resume=resume,
    )  # fmt: skip
    if sample is not None:
        sample.finish(model=model_key, n_layers=loaded.n_layers, provenance_sha256=provenance_module.digest(provenance))
    planned_peak = groups.reserve_bytes + max(map(len, groups.groups), default=0) * groups.layer_bytes
    figures = {
        "device": str(device), "layers": layers, "groups": groups.groups, "n_layers": loaded.n_layers, "rows": n_rows,
        "dim": d, "n_sentences": len(plan.sentence_ids), "tokens": int(plan.n_tokens),
        "final_norm": "" if elmo else final_norm(loaded.model), "forward_seconds": seconds["forward"],
        "measure_seconds": seconds["measure"], "host_seconds": seconds["host"], "host_wait_seconds": seconds["host_wait"],
        "seconds": time.perf_counter() - started, "planned_peak_bytes": planned_peak,
        "peak_bytes": int(torch.cuda.max_memory_allocated(torch.device(device))) if on_cuda else None,
    }  # fmt: skip
    log.info("done: %s", json.dumps(figures))
    return figures


def _left_to_measure(layers: list[int], resume: Resume | None, sample: SampleRequest | None):
    """The part's layers an earlier job did not finish (all of them without ``resume``), and those it did, whose
    kept sample rows go to ``sample``."""
    kept = [layer for layer in layers if resume is not None and layer in resume.done]
    for layer in kept if sample is not None else []:
        sample.add_gathered(layer, resume.kept_sample(layer))
    return [layer for layer in layers if layer not in kept], kept


def _measure_groups(groups: list[list[int]], *, loaded, plan, shard: ShardSettings, measure: MeasureSettings, index,
                    units, device: str, out_folder: Path, digest: str, host_threads: int, model_key: str,
                    log: logging.Logger, sample: SampleRequest | None = None,
                    resume: Resume | None = None) -> dict:  # fmt: skip
    """Each group's pass over the corpus (``fill_group``), then each of its layers measured on the device and
    finished on the host, in threads beside the device's next layer, into ``out_folder`` (and its similarity
    sample written by ``sample``). Returns the seconds spent: forward passes, measuring on the device, on
    the host, and waiting for the host at the end."""
    import torch

    on_cuda = str(device).startswith("cuda")
    storage = getattr(torch, shard.storage_dtype)
    n_rows, d = len(plan.units), model_dim(loaded)
    block_rows = GPU_BLOCK_ROWS if on_cuda else BLOCK_ROWS
    seconds, host_seconds = {"forward": 0.0, "measure": 0.0}, []

    def finish_and_write(layer: int, finish) -> None:  # in a host thread: no row is read
        tick = time.perf_counter()
        write_layer_results(
            finish(), out_folder / layout.path(layout.in_metrics(layout.LAYER_RECORD), layer=layer),
            out_folder / layout.path(layout.in_metrics(layout.LAYER_WORDS), layer=layer),
            out_folder / layout.path(layout.in_metrics(layout.PCS), layer=layer), provenance_sha256=digest,
        )  # fmt: skip
        if resume is not None:
            resume.mark(layer)  # its files (and sample rows) written: a later job of the part keeps them
        host_seconds.append(time.perf_counter() - tick)  # list.append: one step, safe across threads

    # The measures on the host's copies of drawn rows (the panel's isotropy measures, the bootstrap) run in
    # threads beside the device's next layer, so the device does not wait for them; numpy's BLAS one thread
    # each (the threads are the parallelism, and a threaded OpenBLAS beside OpenMP threads may hang).
    with (
        torch.inference_mode(),
        ThreadPoolExecutor(max_workers=max(1, host_threads)) as host,
        threadpool_limits(limits=1, user_api="blas"),
    ):
        pending = []
        for number, group in enumerate(groups, 1):
            tick = time.perf_counter()
            resident = torch.empty((len(group), n_rows, d), dtype=storage, device=device)
            fill_group(loaded, plan, group, resident, shard, device,
                        desc=f"{model_key} layers {group[0]}-{group[-1]} ({number}/{len(groups)})")  # fmt: skip
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
            seconds["forward"] += time.perf_counter() - tick
            tick = time.perf_counter()
            for slot, layer in enumerate(group):
                rows = RowsInMemory(
                    resident[slot], plan.unit_offsets, path=f"{model_key} layer {layer} ({device})",
                    stored_dtype=shard.storage_dtype, after_final_norm=layer_after_final_norm(loaded, layer),
                    block_rows=block_rows, sentence_ids=plan.sentence_ids, remedy=NON_FINITE_REMEDY,
                )  # fmt: skip
                finish = measure_rows_then(rows, layer, index, measure, model=model_key, units=units, log=log)
                if sample is not None:
                    gathered = sample.add(layer, resident[slot])
                    if resume is not None:
                        resume.keep_sample(layer, gathered)
                pending.append(host.submit(finish_and_write, layer, finish))
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
            seconds["measure"] += time.perf_counter() - tick
            del resident
            if on_cuda:
                torch.cuda.empty_cache()
        tick = time.perf_counter()
        for done in pending:
            done.result()  # a host step's error, raised here
        seconds["host_wait"] = time.perf_counter() - tick
    return {**seconds, "host": sum(host_seconds)}


def model_dim(loaded) -> int:
    """The model's hidden size (ELMo's: its output's)."""
    from contextuality.extraction.extract import ElmoModel

    return loaded.dim if isinstance(loaded, ElmoModel) else loaded.model.config.hidden_size


def layer_after_final_norm(loaded, layer: int) -> int:
    """1 for a pre-norm decoder's last layer, which transformers returns after the final norm (as the store's
    layer files record it)."""
    from contextuality.extraction.extract import ElmoModel
    from contextuality.models.loading import final_norm

    return int(not isinstance(loaded, ElmoModel) and bool(final_norm(loaded.model)) and layer == loaded.n_layers - 1)


def run_measure_model_job(
    *,
    model_key: str,
    corpus: str,
    shard: ShardSettings,
    measure: MeasureSettings,
    requested_device: str,
    memory_fraction: float,
    job_memory_mb: int,
    parts: int,
    part: int,
    record_path: Path,
    model_dir: Path,
    tokens_path: Path,
    units_path: Path,
    occurrences_path: Path,
    out_tar: Path,
    out_record: Path,
    threads: int,
    gpus: int,
    sample: SampleRequest | None = None,
    log: logging.Logger = LOG,
) -> dict:
    """Everything one ``measure_model`` job does: pick its device (``metrics.device``, its ``gpu`` resource),
    measure its part's layers there (on torch's CPU backend in groups that fit ``job_memory_mb``, its mem_mb), pack their files into ``out_tar``, write ``out_record`` (and with
    ``sample``, the part's similarity sample)."""
    import torch

    from contextuality.core.layout import corpus_label
    from contextuality.core.runtime import tell_terminal
    from contextuality.extraction.devices import choose_device, describe
    from contextuality.extraction.heap import keep_freed_memory
    from contextuality.store.provenance import shard_provenance

    keep_freed_memory()
    torch.set_num_threads(max(1, threads))
    device, lease = choose_device(requested_device, gpus, part, Path("resources") / ".gpu-leases",
                                  compute_dtype=shard.compute_dtype, setting="metrics.device",
                                  job="device measurement job", rule="measure_model")  # fmt: skip
    tell_terminal(f"{model_key}, {corpus_label(corpus)}: every layer of part {part} of {parts} measured beside its "
                  "forward passes, on "
                  f"{describe(device)}{'' if str(device).startswith('cuda') else ' (torch CPU backend)'}")  # fmt: skip
    try:
        # what a store's manifest would record, less what changes no row here (the number of shards)
        made_from = rows_provenance(shard_provenance(model_key, stored_params(shard), record_path, tokens_path,
                                                     units_path))  # fmt: skip
        # the part's folder before it is packed, with the layers an earlier job of the part finished, if it
        # measured what this one measures (a job killed near its end re-measures only what it had left)
        staging = out_tar.with_suffix("")
        resume = Resume(staging, resume_key(made_from, measure, parts, part, sample))
        figures = measure_model(
            model_key=model_key, shard=shard, measure=measure, device=device, memory_fraction=memory_fraction,
            job_memory_mb=job_memory_mb, parts=parts, part=part, record_path=record_path, model_dir=model_dir,
            tokens_path=tokens_path, units_path=units_path, occurrences_path=occurrences_path, out_folder=staging,
            provenance=made_from, host_threads=threads, sample=sample, resume=resume, log=log,
        )  # fmt: skip
        pack(staging, out_tar)
        resume.clear()
        record = device_record(figures, model_key=model_key, provenance=made_from, dtype=shard.storage_dtype)
        with atomic_path(out_record) as tmp:
            tmp.write_text(json.dumps(record, indent=1) + "\n")
        return figures
    finally:
        if lease is not None:
            lease.close()
