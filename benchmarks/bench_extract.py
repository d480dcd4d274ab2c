"""Extraction throughput, measured in one run on the same sentences and model (issue 3's targets).

(a) the pipeline: tokenize + align, length-sorted padded batches, pooling, HDF5 writes;
(b) the ceiling: the same forward passes of the same batches, nothing stored;
(c) the naive way of the paper's code: one sentence at a time (batch size 1), every layer kept.

Targets on the 2-core CPU with all-MiniLM-L6-v2 and 2,000 STS sentences: (a) >= 3x (c), (a) >= 0.85x (b).

    python benchmarks/bench_extract.py --model minilm --sentences 2000

Needs `snakemake --cores 2 results/corpus/words.parquet resources/models/minilm/source.json` first.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch
import yaml

from contextuality import extract, models
from contextuality.words import is_punct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", help="model key in the config (default: minilm)")
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--naive-sentences", type=int, default=500, help="(c) runs on a prefix; tokens/s compared")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = yaml.safe_load(Path(args.config).read_text())
    spec = config["models"][args.model]
    batch_size = spec.get("batch_size") or config["extraction"]["batch_size"]
    record = json.loads(Path(f"resources/models/{args.model}/source.json").read_text())
    loaded = models.load(record, spec, "cpu")
    sentences = pd.read_parquet("results/corpus/sentences.parquet", columns=["sentence_id", "text"]).iloc[: args.sentences]
    words = pd.read_parquet("results/corpus/words.parquet", columns=["sentence_id", "word", "char_start"])
    words = words[words["sentence_id"] < args.sentences]
    n_tokens = sum(len(ids) for ids in loaded.tokenizer(sentences["text"].tolist())["input_ids"])
    indexing, pooling = spec.get("indexing", "word"), spec.get("pooling", "first")
    is_punct("warm-up")  # one-time spaCy start (about 1 s), like the model load: not part of any rate

    # (a) the pipeline, end to end for one shard
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        extract.extract_shard(
            loaded, sentences, words, Path(tmp) / "shard.h5", Path(tmp) / "units.parquet",
            indexing=indexing, pooling=pooling, batch_size=batch_size, storage_dtype="float16",
            policy="truncate", device="cpu", disk_factor=1.0, attrs={},
        )
        pipeline_s = time.perf_counter() - started

    # (b) the same forward passes (same windows, same batches), nothing stored
    aligned, _, _ = extract.tokenize_sentences(loaded, sentences, words, indexing=indexing, policy="truncate")
    window = extract.WINDOW_BATCHES * batch_size
    started = time.perf_counter()
    for first in range(0, len(aligned), window):
        block = aligned[first:first + window]
        order = sorted(range(len(block)), key=lambda i: len(block[i].input_ids))
        for start in range(0, len(order), batch_size):
            batch = [block[i] for i in order[start:start + batch_size]]
            ids, mask = extract.padded_batch(batch, loaded.tokenizer.pad_token_id)
            with torch.inference_mode():
                loaded.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    ceiling_s = time.perf_counter() - started

    # (c) naive, as the original code did: one sentence per forward pass, and its (layers, tokens, dim)
    # float32 array written as its own HDF5 dataset
    naive = sentences["text"].tolist()[: args.naive_sentences]
    naive_tokens = sum(len(ids) for ids in loaded.tokenizer(naive)["input_ids"])
    with tempfile.TemporaryDirectory() as tmp, h5py.File(Path(tmp) / "naive.h5", "w") as out:
        started = time.perf_counter()
        for i, text in enumerate(naive):
            encoding = loaded.tokenizer(text, return_tensors="pt")
            with torch.no_grad():
                output = loaded.model(**encoding, output_hidden_states=True)
            out.create_dataset(str(i), data=np.stack([layer[0].numpy() for layer in output.hidden_states]))
        naive_s = time.perf_counter() - started

    rate = {"a": n_tokens / pipeline_s, "b": n_tokens / ceiling_s, "c": naive_tokens / naive_s}
    print(f"model {args.model}, {len(sentences)} sentences, {n_tokens} tokens, batch size {batch_size}, {args.threads} threads")
    print(f"(a) pipeline           {rate['a']:8.0f} tokens/s  ({pipeline_s:.1f} s)")
    print(f"(b) forward only       {rate['b']:8.0f} tokens/s  ({ceiling_s:.1f} s)")
    print(f"(c) naive, batch 1     {rate['c']:8.0f} tokens/s  ({naive_s:.1f} s on {len(naive)} sentences)")
    print(f"(a)/(c) = {rate['a'] / rate['c']:.2f}  (target >= 3)")
    print(f"(a)/(b) = {rate['a'] / rate['b']:.2f}  (target >= 0.85)")


if __name__ == "__main__":
    main()
