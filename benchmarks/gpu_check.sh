#!/usr/bin/env bash
# The GPU check: extraction throughput and stored-vector accuracy on a CUDA machine, one command,
# at most 10 minutes. From the repository root:
#
#   benchmarks/gpu_check.sh                 # every STS sentence (25,088)
#   SENTENCES=5000 benchmarks/gpu_check.sh  # a shorter run
#
# It runs a BERT-base-sized random model (12 x 768) and SmolLM2-135M (real weights if
# resources/models/smollm2/model holds them, else random weights of its configuration: carry that folder's
# config.json and tokenizer files) in float16 and bfloat16; prints tokens/s of the pipeline (a) and of the
# forward passes alone (b), (a)/(b), the lowest per-row cosine against a float32 CPU pass (must be >= 0.999),
# and, with two GPUs, two shards on two GPUs at once. Results also go to $OUT/gpu_check.json (or ./).
# Needs python3 with torch (CUDA), transformers, h5py, pandas, pyarrow; spaCy is optional.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HDF5_USE_FILE_LOCKING=FALSE
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 590 python3 benchmarks/gpu_check.py --sentences "${SENTENCES:-25088}" "$@"
