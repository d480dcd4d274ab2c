"""The GPU check: extraction throughput and stored-vector accuracy on a CUDA machine, in one run.

For a BERT-base-sized model (12 layers x 768, random weights, a WordPiece tokenizer trained on the
corpus) and for SmolLM2-135M (its real weights when ``--smollm2-dir`` holds them, else random weights
of its exact configuration), in float16 and in bfloat16:

* (a) the pipeline (plan + extraction: selection and cast on the GPU, pinned non-blocking copies,
  background HDF5 writes) and (b) the same forward passes storing nothing, in tokens/s, and (a)/(b);
* every stored row of the first ``--check-sentences`` sentences against a float32 CPU pass of the same
  model: the cosine of each row must be >= 0.999;
* with two or more GPUs, two shards at once on two GPUs (one process each, as two shard jobs would
  run), their rows equal to the one-GPU run's.

    python benchmarks/gpu_check.py --sentences 25088      (benchmarks/gpu_check.sh wraps it)

Runs from the repository root with ``src`` on the path; needs torch with CUDA, transformers, h5py,
pandas and pyarrow (spaCy is optional: without it the words come from a regular expression, which is
enough for a throughput and accuracy check). Exit status 1 if a row's cosine is below 0.999.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from contextuality.corpus.sts import read_release, release_files  # noqa: E402
from contextuality.extraction import alignment, extract, windows  # noqa: E402
from contextuality.extraction.plan import plan_model  # noqa: E402
from contextuality.models import loading, randommodels  # noqa: E402

COSINE_FLOOR = 0.999
YEARS_DOMAINS = None  # every bundled release file


def corpus(n_sentences: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The first STS sentences of the bundled release files, and their words with character offsets."""
    texts = []
    for year_dir in sorted((ROOT / "resources" / "sts").iterdir()):
        if not year_dir.name.isdigit():
            continue
        for found in sorted((year_dir / "test").glob("*.input.*.txt")):
            domain = found.name.split(".input.", 1)[1].removesuffix(".txt")
            pairs, _ = read_release(release_files(ROOT / "resources" / "sts", int(year_dir.name), "test", domain))
            texts += [text for pair in pairs for text in (pair["sentence1"], pair["sentence2"])]
    texts = [text.replace('"', "") for text in texts][:n_sentences]
    sentences = pd.DataFrame({"sentence_id": range(len(texts)), "text": texts})
    try:
        from contextuality.corpus.words import word_table

        return sentences, word_table(sentences)
    except ImportError:  # no spaCy on this machine: words and punctuation from the characters
        rows = [
            (i, p, m.group(), m.start())
            for i, text in enumerate(texts)
            for p, m in enumerate(re.finditer(r"\w+|[^\w\s]", text))
        ]
        words = pd.DataFrame(rows, columns=["sentence_id", "position", "word", "char_start"])
        words["is_punct"] = words["word"].map(lambda w: all(unicodedata.category(c).startswith("P") for c in w))
        alignment.is_punct = lambda text: all(unicodedata.category(c).startswith("P") for c in text)
        return sentences, words.astype({"sentence_id": "int64", "position": "int32", "char_start": "int32"})


def bert_base_folder(texts: list[str], folder: Path, layers: int = 12, hidden: int = 768) -> Path:
    """A BERT-base-sized model (12 x 768, 12 heads; else ``layers`` x ``hidden``, a head per 64 dims) with
    random weights and a corpus-trained WordPiece."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tokenizer = randommodels.train_corpus_tokenizer(texts, "bert", 8000)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                        max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def smollm2_folder(given: Path, folder: Path) -> tuple[Path, str]:
    """SmolLM2's folder when it holds weights; else its configuration and tokenizer with random weights."""
    if (given / "model.safetensors").exists():
        return given, "real weights"
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(given)
    AutoModel.from_config(config).save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(given).save_pretrained(folder)
    return folder, "random weights of its configuration"


def record_of(folder: Path, key: str) -> dict:
    files = loading.weight_files(folder)
    return {
        "key": key,
        "source": "path",
        "weights": [f.name for f in files],
        "weights_sha256": loading.weights_digest(files),
        "files": loading.file_digests(folder),
    }  # what the build records; every load checks it


def stored(path: Path, n_layers: int, rows: slice) -> np.ndarray:
    with h5py.File(path) as shard:
        return np.stack([shard[f"layer_{layer:02d}"][rows] for layer in range(n_layers)]).astype(np.float32)


def shard_job(args) -> None:
    """One shard on one GPU, as a shard job of the workflow would run it (a process of its own)."""
    folder, record, spec, plan, out, device, dtype, batch_size = args
    loaded = loading.load(record, folder, device, dtype, max_length=None, allow_pickle=False)
    extract.extract_shard(
        loaded,
        plan,
        out,
        pooling=spec["pooling"],
        batch_size=batch_size,
        storage_dtype="float16",
        device=device,
        disk_factor=1.0,
        attrs={},
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_model(name: str, folder: Path, spec: dict, sentences, words, args, tmp: Path) -> list[dict]:
    record = record_of(folder, name)
    reference_model = loading.load(record, folder, "cpu", "float32", max_length=None, allow_pickle=False)
    plan = plan_model(
        reference_model, sentences, words, indexing=spec["indexing"], tokenization="natural", policy="truncate"
    )
    check = plan.slice(0, min(args.check_sentences, len(plan.sentence_ids)))
    reference_path = tmp / f"{name}-cpu.h5"
    extract.extract_shard(
        reference_model,
        check,
        reference_path,
        pooling=spec["pooling"],
        batch_size=args.batch_size,
        storage_dtype="float32",
        device="cpu",
        disk_factor=1.0,
        attrs={},
    )
    n_check = len(check.units)
    results = []
    for dtype in ("float16", "bfloat16"):
        loaded = loading.load(record, folder, args.device, dtype, max_length=None, allow_pickle=False)
        out = tmp / f"{name}-{dtype}.h5"
        synchronize(args.device)
        started = time.perf_counter()
        timed_plan = plan_model(
            loaded, sentences, words, indexing=spec["indexing"], tokenization="natural", policy="truncate"
        )
        extract.extract_shard(
            loaded,
            timed_plan,
            out,
            pooling=spec["pooling"],
            batch_size=args.batch_size,
            storage_dtype="float16",
            device=args.device,
            disk_factor=1.0,
            attrs={},
        )
        pipeline_s = time.perf_counter() - started
        forward = windows.model_forward(loaded)
        window = extract.WINDOW_BATCHES * args.batch_size
        synchronize(args.device)
        started = time.perf_counter()
        for first in range(0, len(plan.sentence_ids), window):
            last = min(first + window, len(plan.sentence_ids))
            for _, ids, mask in windows.padded_batches(plan, first, last, args.batch_size, loaded.tokenizer):
                with torch.inference_mode():
                    forward(torch.from_numpy(ids).to(args.device), torch.from_numpy(mask).to(args.device))
        synchronize(args.device)
        forward_s = time.perf_counter() - started
        got, want = (
            stored(out, loaded.n_layers, slice(0, n_check)),
            stored(reference_path, loaded.n_layers, slice(0, n_check)),
        )
        norms = np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1)
        cosine = np.where(norms > 0, np.einsum("lrd,lrd->lr", got, want) / np.where(norms > 0, norms, 1), 1.0)
        worst_layer = int(np.argmin(cosine.min(axis=1)))
        results.append(
            {
                "model": name,
                "dtype": dtype,
                "tokens": plan.n_tokens,
                "units": len(plan.units),
                "a_tokens_per_s": plan.n_tokens / pipeline_s,
                "b_tokens_per_s": plan.n_tokens / forward_s,
                "a_over_b": forward_s / pipeline_s,
                "rows_checked": n_check * loaded.n_layers,
                "min_cosine": float(cosine.min()),
                "min_cosine_layer": worst_layer,
                "rows_below_floor": int((cosine < COSINE_FLOOR).sum()),
            }
        )
        if args.device.startswith("cuda") and torch.cuda.device_count() >= 2 and dtype == "float16":
            half = (
                len(plan.sentence_ids)
                // (extract.WINDOW_BATCHES * args.batch_size)
                // 2
                * extract.WINDOW_BATCHES
                * args.batch_size
            )
            jobs = [
                (folder, record, spec, plan.slice(0, half), tmp / f"{name}-gpu0.h5", "cuda:0", dtype, args.batch_size),
                (
                    folder,
                    record,
                    spec,
                    plan.slice(half, len(plan.sentence_ids)),
                    tmp / f"{name}-gpu1.h5",
                    "cuda:1",
                    dtype,
                    args.batch_size,
                ),
            ]
            started = time.perf_counter()
            with multiprocessing.get_context("spawn").Pool(2) as pool:
                pool.map(shard_job, jobs)
            two_s = time.perf_counter() - started
            halves = np.concatenate(
                [
                    stored(tmp / f"{name}-gpu0.h5", loaded.n_layers, slice(None)),
                    stored(tmp / f"{name}-gpu1.h5", loaded.n_layers, slice(None)),
                ],
                axis=1,
            )
            one = stored(out, loaded.n_layers, slice(None))
            results[-1]["two_gpus_tokens_per_s"] = plan.n_tokens / two_s  # includes two model loads
            results[-1]["two_gpus_equal_one_gpu"] = bool(np.array_equal(halves, one))
        del loaded
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=25088)
    parser.add_argument("--check-sentences", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--smollm2-dir", type=Path, default=ROOT / "resources" / "models" / "smollm2" / "model")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_check.json")
    parser.add_argument("--device", default="cuda:0", help="cpu runs the same code on the CPU (to test this script)")
    parser.add_argument("--bert-size", default="12x768", help="the random BERT's layers x hidden size (a small one, "
                        "e.g. 2x64, runs the script on a CPU in seconds)")  # fmt: skip
    args = parser.parse_args(argv)
    bert_layers, bert_hidden = (int(v) for v in args.bert_size.split("x"))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("gpu_check: torch sees no CUDA device")
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    where = (
        f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}"
        if args.device.startswith("cuda")
        else "CPU"
    )
    print(f"torch {torch.__version__}, {where}", flush=True)
    sentences, words = corpus(args.sentences)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bert = bert_base_folder(sentences["text"].tolist(), tmp / "bert-base-random", bert_layers, bert_hidden)
        results += check_model(
            "bert-base-random", bert, {"indexing": "subword", "pooling": "first"}, sentences, words, args, tmp
        )
        if (args.smollm2_dir / "config.json").exists():
            smol, kind = smollm2_folder(args.smollm2_dir, tmp / "smollm2-random")
            print(f"SmolLM2: {kind}", flush=True)
            results += check_model(
                "smollm2", smol, {"indexing": "word", "pooling": "last"}, sentences, words, args, tmp
            )
        else:
            print(f"SmolLM2 skipped: no config.json in {args.smollm2_dir}", flush=True)
    columns = [
        "model",
        "dtype",
        "tokens",
        "a_tokens_per_s",
        "b_tokens_per_s",
        "a_over_b",
        "min_cosine",
        "rows_below_floor",
    ]
    print(
        pd.DataFrame(results)
        .reindex(columns=columns + ["two_gpus_tokens_per_s", "two_gpus_equal_one_gpu"])
        .to_string(index=False)
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    failed = [r for r in results if r["rows_below_floor"]]
    for r in failed:
        print(
            f"FAIL {r['model']} {r['dtype']}: {r['rows_below_floor']} rows below cosine {COSINE_FLOOR} "
            f"(min {r['min_cosine']:.5f} at layer {r['min_cosine_layer']})"
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
