"""The device check: the study measured on a GPU beside its forward passes, against the passes alone, in one run.

For a BERT-base-sized model (12 x 768, random weights, a WordPiece tokenizer trained on the corpus; float16
forward passes) and for SmolLM2-135M's configuration (30 x 576; random weights; its own tokenizer when
``--smollm2-dir`` holds one, else a byte-level BPE trained on the corpus; bfloat16), over ``--sentences``
STS sentences batched by tokens (``--max-batch-tokens``):

* (a) the device path (``measure.device_job.measure_model``: every layer measured where the passes leave it,
  the default metrics) in tokens/s, from the model's load to the last per-layer file, and (b) the same
  forward passes alone, in tokens/s; (a)/(b) (target >= 0.8 for the BERT-base size), and the whole study's
  wall time (target under one minute for the BERT-base size);
* the device's measurement time per layer against its products floor on the same device (every layer's
  X^T X plus every word's Gram or scatter matrix, in the compute dtype; target <= 3x);
* on two layers per model, the device's tables against the numpy engine on the same rows copied to the host:
  within 1e-10 in float64 and 1e-5 per word in float32, the host-drawn columns byte for byte, the degenerate
  words equal;
* the device path again: byte-identical per-layer files; and with room for one group of layers fewer than
  it needs (several passes, each stopping after its group's deepest layer): byte-identical again;
* peak device memory against the job's plan (<= 1.1 x);
* an 8B-class model's layer plan (33 x 4096 on STS) for an 80 GB and a 141 GB GPU: groups and passes.

    python benchmarks/device_check.py                       (benchmarks/device_check.sh wraps it)
    python benchmarks/device_check.py --device cpu --sentences 120 --shapes tiny   (the test's: torch's CPU)

Runs from the repository root with ``src`` on the path. Results also go to $OUT/device_check.json. Exit
status 1 when a check fails (tolerance, bytes, memory); throughput and floor ratios are reported, not failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check import bert_base_folder, corpus, record_of, synchronize  # noqa: E402

from contextuality.core.settings import ShardSettings  # noqa: E402
from contextuality.corpus.words import word_index  # noqa: E402
from contextuality.extraction import extract, windows  # noqa: E402
from contextuality.extraction.plan import build_occurrences, plan_model, write_plan  # noqa: E402
from contextuality.measure import device_job  # noqa: E402
from contextuality.measure.device import plan as device_plan  # noqa: E402
from contextuality.measure.layer_job import OccurrenceIndex, RowsInMemory, measure_rows, read_units  # noqa: E402
from contextuality.models import loading, randommodels  # noqa: E402
from contextuality.workflow.estimates import machine_memory_bytes  # noqa: E402
from contextuality.workflow.schema import load_settings  # noqa: E402

# SmolLM2-135M's configuration (its config.json): a Llama decoder with tied embeddings
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
               tie_word_embeddings=True, hidden_act="silu")  # fmt: skip
TINY = {"bert": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=2, intermediate_size=128),
        "smollm2": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
                        num_key_value_heads=1)}  # fmt: skip
# The columns the numpy engine and the device compute from the same host-drawn rows with the same numpy code.
HOST_DRAWN = ["baseline_cosine", "baseline_mev", "n_baseline_vectors", "norm_mean", "norm_std", "pc1_ratio",
              "effective_rank", "isoscore", "isoscore_star", "twonn_dimension", "geometry_sample", "massive_dims",
              "massive_occurrences"]  # fmt: skip
GIB = 1 << 30


def smollm2_folder(texts: list[str], folder: Path, given: Path | None, shapes: str) -> Path:
    """SmolLM2's configuration with random weights; its tokenizer from ``given`` when there, else a corpus BPE."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if given is not None and (given / "tokenizer.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(given)
    else:
        tokenizer = randommodels.train_corpus_tokenizer(texts, "gpt2", 8000)
    shape = dict(SMOLLM2, vocab_size=len(tokenizer))
    if shapes == "tiny":
        shape.update(TINY["smollm2"])
    config = LlamaConfig(**shape, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_bert_folder(texts: list[str], folder: Path) -> Path:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tokenizer = randommodels.train_corpus_tokenizer(texts, "bert", 2000)
    BertModel(BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **TINY["bert"])).save_pretrained(
        folder, safe_serialization=True)  # fmt: skip
    tokenizer.save_pretrained(folder)
    return folder


def prepare(name: str, folder: Path, spec: dict, sentences, words, index, tmp: Path) -> dict:
    """The model's record and plan files (tokens, units, occurrences) as the workflow's plan rule writes them."""
    record = record_of(folder, name)
    (tmp / f"{name}.source.json").write_text(json.dumps(record))
    loaded = loading.load(record, folder, "cpu", "float32", max_length=None, allow_pickle=False)
    plan = plan_model(loaded, sentences, words, indexing=spec["indexing"], tokenization="natural", policy="truncate")
    paths = {"record": tmp / f"{name}.source.json", "tokens": tmp / f"{name}.tokens.parquet",
             "units": tmp / f"{name}.units.parquet", "occurrences": tmp / f"{name}.occurrences.parquet"}  # fmt: skip
    write_plan(plan, paths["tokens"], paths["units"])
    occurrences = build_occurrences(plan.units, index, spec["indexing"], 5, "occurrences", sentences)
    occurrences.to_parquet(paths["occurrences"], index=False)
    return paths


def forward_alone(shard: ShardSettings, record: dict, folder: Path, paths: dict, device: str) -> tuple[float, int]:
    """(b): the plan's forward passes alone (the same batches), seconds and tokens."""
    from contextuality.extraction.plan import read_plan

    plan = read_plan(paths["tokens"], paths["units"])
    loaded = loading.load(record, folder, device, shard.compute_dtype, max_length=None, allow_pickle=False)
    forward = windows.model_forward(loaded)
    window = extract.WINDOW_BATCHES * shard.batch_size
    batches = [(torch.from_numpy(ids), torch.from_numpy(mask)) for first in range(0, len(plan.sentence_ids), window)
               for _, ids, mask in windows.padded_batches(plan, first, min(first + window, len(plan.sentence_ids)),
                                                          shard.batch_size, loaded.tokenizer, shard.max_batch_tokens)]  # fmt: skip
    with torch.inference_mode():
        forward(batches[0][0].to(device), batches[0][1].to(device))  # warm up
        synchronize(device)
        started = time.perf_counter()
        for ids, mask in batches:
            forward(ids.to(device, non_blocking=True), mask.to(device, non_blocking=True))
        synchronize(device)
    return time.perf_counter() - started, int(plan.n_tokens)


def device_products(X, rows: np.ndarray, group_starts: np.ndarray, work) -> None:
    """The products floor on the device (``floor.products`` there): X^T X of every row and every word's Gram
    (n <= d) or scatter matrix (n > d), small words stacked by size, in the compute dtype."""
    d = X.shape[1]
    Y = X.to(work)
    _ = Y.T @ Y
    sizes = np.diff(np.append(group_starts, len(rows)))
    for size in np.unique(sizes):
        words = np.flatnonzero(sizes == size)
        if size <= d:
            per = max(1, (1 << 22) // (int(size) * d))
            for a in range(0, len(words), per):
                block = Y[
                    torch.as_tensor(rows[group_starts[words[a : a + per], None] + np.arange(size)], device=X.device)
                ]
                _ = block @ block.transpose(1, 2)
        else:
            for word in words:
                block = Y[torch.as_tensor(rows[group_starts[word] : group_starts[word] + size], device=X.device)]
                _ = block.T @ block


def members(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as handle:
        return {m.name: handle.extractfile(m).read() for m in handle.getmembers() if m.isfile()}


def run_device(name, shard, measure, device, paths, folder, out: Path, host_threads: int) -> dict:
    # on torch's CPU backend the job plans in its memory: here 0.9 of the machine's, the workflow's cap
    job_memory_mb = int(0.9 * (machine_memory_bytes() or 8 << 30)) >> 20
    figures = device_job.measure_model(
        model_key=name, shard=shard, measure=measure, device=device, memory_fraction=0.9, job_memory_mb=job_memory_mb,
        parts=1, part=0, record_path=paths["record"], model_dir=folder, tokens_path=paths["tokens"],
        units_path=paths["units"], occurrences_path=paths["occurrences"], out_folder=out, provenance={"check": name},
        host_threads=host_threads,
    )  # fmt: skip
    return figures


def tolerance(name, shard, measure, device, paths, folder, layers: list[int], out: Path) -> list[dict]:
    """The device's tables against the numpy engine on the same rows (copied to the host), in float32 and float64."""
    from contextuality.extraction.plan import read_plan

    plan = read_plan(paths["tokens"], paths["units"])
    record = json.loads(paths["record"].read_text())
    loaded = extract.load_for_extraction(name, shard, record, folder, device)
    index = OccurrenceIndex.from_parquet(paths["occurrences"])
    units = read_units(paths["units"])
    d = loaded.model.config.hidden_size
    resident = torch.empty((len(layers), len(plan.units), d), dtype=getattr(torch, shard.storage_dtype), device=device)
    with torch.inference_mode():
        device_job.fill_group(loaded, plan, layers, resident, shard, device, desc=f"{name} layers {layers}")
    checks = []
    for slot, layer in enumerate(layers):
        host = resident[slot].cpu().numpy()
        for dtype, word_tol in (("float32", 1e-5), ("float64", 1e-10)):
            settings = dataclasses.replace(measure, compute_dtype=dtype)
            on_device = measure_rows(RowsInMemory(resident[slot], plan.unit_offsets, path=name, stored_dtype=shard.storage_dtype,
                                                  block_rows=device_plan.GPU_BLOCK_ROWS), layer, index, settings,
                                     model=name, units=units)  # fmt: skip
            on_host = measure_rows(RowsInMemory(host.astype(dtype), plan.unit_offsets, path=name,
                                                stored_dtype=shard.storage_dtype), layer, index, settings, model=name,
                                   units=units)  # fmt: skip
            words = {c: float(np.nanmax(np.abs(on_device.words[c].to_numpy() - on_host.words[c].to_numpy()), initial=0))
                     for c in ("self_similarity", "mev", "mev_literal", "mev_centered")}  # fmt: skip
            row = {c: abs(on_device.row[c] - on_host.row[c]) for c, v in on_host.row.items()
                   if isinstance(v, float) and c not in HOST_DRAWN and np.isfinite(v)}  # fmt: skip
            drawn_equal = all(on_device.row[c] == on_host.row[c] or (on_host.row[c] != on_host.row[c]
                                                                   and on_device.row[c] != on_device.row[c])
                              for c in HOST_DRAWN)  # fmt: skip
            degenerate_equal = on_device.row["n_degenerate_words"] == on_host.row["n_degenerate_words"]
            worst = max(words.values())
            checks.append({"model": name, "layer": layer, "dtype": dtype, "max_word_diff": worst,
                           "worst_word_measure": max(words, key=words.get), "max_layer_diff": max(row.values(), default=0.0),
                           "host_drawn_equal": drawn_equal, "degenerate_equal": degenerate_equal,
                           "ok": bool(worst <= word_tol and drawn_equal and degenerate_equal)})  # fmt: skip
    del resident
    return checks


def eight_b_plans() -> list[dict]:
    """An 8B-class decoder's (33 x 4096, bf16 weights 16.1 GB) layer groups on STS (400k rows, float16) for an
    80 GB and a 141 GB GPU, as the job plans them from the free memory after loading the model."""
    rows, d, n_layers, weights = 400_000, 4096, 33, 8.03e9 * 2
    plans = []
    for gpu, total in (("80 GB", 79.6 * GIB), ("141 GB", 140.4 * GIB)):
        reserve = device_plan.reserve_bytes(d=d, n_layers=n_layers, batch_tokens=16_384, widest_window=4 * 64 * 64,
                                           itemsize=2, on_cuda=True)  # fmt: skip
        plan = device_plan.plan_groups(list(range(n_layers)), rows * d * 2, int(total - weights), 0.9, reserve)
        full = sum((max(g) + 1) / n_layers for g in plan.groups)
        plans.append({"gpu": gpu, "groups": len(plan.groups), "layers_per_group": max(map(len, plan.groups)),
                      "full_pass_equivalents": round(full, 2), "layer_gib": round(plan.layer_bytes / GIB, 2),
                      "room_gib": round(plan.room_bytes / GIB, 1)})  # fmt: skip
    return plans


def check_model(name, folder, spec, sentences, words, index, args, tmp: Path) -> tuple[dict, list[dict]]:
    paths = prepare(name, folder, spec, sentences, words, index, tmp)
    config = {"models": {name: {"source": "random", "architecture": "gpt2"}},
              "extraction": {"batch_size": args.batch_size, "max_batch_tokens": args.max_batch_tokens,
                             "compute_dtype": spec["dtype"] if args.device != "cpu" else "float32",
                             "storage_dtype": "float16"}}  # fmt: skip
    settings = load_settings(config)
    shard = dataclasses.replace(
        settings.shard(name), indexing=spec["indexing"], pooling=spec["pooling"], device=args.device
    )
    measure = settings.metrics.measure
    record = json.loads(paths["record"].read_text())
    forward_s, tokens = forward_alone(shard, record, folder, paths, args.device)
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    synchronize(args.device)
    started = time.perf_counter()
    first = run_device(name, shard, measure, args.device, paths, folder, tmp / f"{name}-a", args.host_threads)
    whole_s = time.perf_counter() - started
    again = run_device(name, shard, measure, args.device, paths, folder, tmp / f"{name}-b", args.host_threads)
    room = (max(map(len, first["groups"])) - 1) * first["rows"] * first["dim"] * 2
    room = max(room, first["rows"] * first["dim"] * 2)
    with mock.patch.object(device_plan, "layer_room", lambda *_: room):  # one layer fewer a group: more groups
        split = run_device(name, shard, measure, args.device, paths, folder, tmp / f"{name}-c", args.host_threads)
    files = {key: {p.relative_to(tmp / f"{name}-{key}").as_posix(): p.read_bytes()
                   for p in sorted((tmp / f"{name}-{key}").rglob("*")) if p.is_file()} for key in "abc"}  # fmt: skip
    # the products floor of every layer, on the device, from one pass's rows
    from contextuality.extraction.plan import read_plan

    plan = read_plan(paths["tokens"], paths["units"])
    occurrence_index = OccurrenceIndex.from_parquet(paths["occurrences"])
    loaded = extract.load_for_extraction(name, shard, record, folder, args.device)
    layers = list(range(loaded.n_layers))
    resident = torch.empty((1, len(plan.units), first["dim"]), dtype=torch.float16, device=args.device)
    floor_s = 0.0
    with torch.inference_mode():
        for layer in (layers[len(layers) // 2], layers[-1]):
            device_job.fill_group(loaded, plan, [layer], resident, shard, args.device, desc=f"{name} floor {layer}")
            synchronize(args.device)
            tick = time.perf_counter()
            device_products(resident[0], occurrence_index.rows, occurrence_index.group_starts, torch.float32)
            synchronize(args.device)
            floor_s += (time.perf_counter() - tick) / 2
    del resident, loaded
    checks = tolerance(name, shard, measure, args.device, paths, folder, [1, layers[-1]], tmp)
    row = {
        "model": name, "tokens": tokens, "layers": len(layers), "rows": first["rows"], "dim": first["dim"],
        "a_tokens_per_s": tokens / (first["forward_seconds"] + first["measure_seconds"] + first["host_wait_seconds"]),
        "b_tokens_per_s": tokens / forward_s, "whole_study_s": whole_s,
        "forward_s": first["forward_seconds"], "measure_s_per_layer": first["measure_seconds"] / len(layers),
        "host_s": first["host_seconds"], "host_wait_s": first["host_wait_seconds"],
        "floor_s_per_layer": floor_s, "groups": len(first["groups"]), "split_groups": len(split["groups"]),
        "rerun_identical": files["a"] == files["b"], "split_identical": files["a"] == files["c"],
        "peak_gib": (first["peak_bytes"] or 0) / GIB, "planned_peak_gib": first["planned_peak_bytes"] / GIB,
    }  # fmt: skip
    row["a_over_b"] = row["a_tokens_per_s"] / row["b_tokens_per_s"]
    row["measure_over_floor"] = row["measure_s_per_layer"] / row["floor_s_per_layer"] if floor_s else float("nan")
    row["peak_within_plan"] = not first["peak_bytes"] or first["peak_bytes"] <= 1.1 * first["planned_peak_bytes"]
    del again
    return row, checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=25088)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--max-batch-tokens", type=int, default=32768)
    parser.add_argument(
        "--host-threads",
        type=int,
        default=min(16, os.cpu_count() or 1),
        help="threads finishing layers on the host beside the device",
    )
    parser.add_argument("--shapes", choices=["base", "tiny"], default="base", help="tiny: small models (the test's)")
    parser.add_argument("--models", default="bert-base,smollm2")
    parser.add_argument("--smollm2-dir", type=Path, default=ROOT / "resources" / "models" / "smollm2" / "model")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "device_check.json")
    parser.add_argument("--device", default="cuda:0", help="cpu runs the same code on torch's CPU backend")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("device_check: torch sees no CUDA device")
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "torch's CPU backend"
    print(f"torch {torch.__version__}, {where}", flush=True)
    started = time.perf_counter()
    sentences, words = corpus(args.sentences)
    index = word_index(words, sentences, 5, "occurrences")
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = sentences["text"].tolist()
        for name in args.models.split(","):
            if name == "bert-base":
                folder = (
                    bert_base_folder(texts, tmp / name)
                    if args.shapes == "base"
                    else tiny_bert_folder(texts, tmp / name)
                )
                spec = {"indexing": "subword", "pooling": "first", "dtype": "float16"}
            else:
                folder = smollm2_folder(texts, tmp / name, args.smollm2_dir, args.shapes)
                spec = {"indexing": "word", "pooling": "last", "dtype": "bfloat16"}
            row, model_checks = check_model(name, folder, spec, sentences, words, index, args, tmp)
            rows.append(row)
            checks += model_checks
            print(pd.DataFrame([row]).T.to_string(header=False), flush=True)
    plans = eight_b_plans()
    print("\n" + pd.DataFrame(rows).reindex(columns=["model", "tokens", "a_tokens_per_s", "b_tokens_per_s", "a_over_b",
                                                      "whole_study_s", "measure_s_per_layer", "floor_s_per_layer",
                                                      "measure_over_floor", "rerun_identical", "split_identical",
                                                      "peak_gib", "planned_peak_gib"]).to_string(index=False))  # fmt: skip
    print("\n" + pd.DataFrame(checks).to_string(index=False))
    print("\n8B-class on STS:\n" + pd.DataFrame(plans).to_string(index=False))
    print(f"\n{time.perf_counter() - started:.0f} s in all", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"models": rows, "tolerance": checks, "eight_b": plans}, indent=1, default=str))
    failed = [f"{c['model']} layer {c['layer']} {c['dtype']}: tolerance" for c in checks if not c["ok"]]
    failed += [f"{r['model']}: {k}" for r in rows for k in ("rerun_identical", "split_identical", "peak_within_plan")
               if not r[k]]  # fmt: skip
    for line in failed:
        print("FAIL", line)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
