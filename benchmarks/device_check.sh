#!/usr/bin/env bash
# The device check: the study measured on one GPU beside its forward passes, against the passes
# alone, one command, at most 8 minutes. From the repository root:
#
#   benchmarks/device_check.sh                  # every STS sentence (25,088), BERT-base size and SmolLM2's
#   SENTENCES=5000 benchmarks/device_check.sh   # a shorter run
#
# Prints, per model: tokens/s of the device path (a) and of the forward passes alone (b), (a)/(b), the whole
# study's seconds, measurement seconds per layer against the device's products floor, a rerun's and a
# several-group run's byte-identity, peak device memory against the plan; the device's tables against the numpy
# engine on the same rows on two layers (float32 and float64); an 8B-class model's layer plan for 80 and 141 GB;
# then the similarity stage's products on the GPU (bench_similarity.py --device cuda:0), checked against numpy.
# Results also go to $OUT/device_check.json (or ./). Needs python3 with torch (CUDA), transformers, numpy,
# scipy, scikit-learn, pandas, pyarrow and scikit-dimension; array-api-compat from wheels carried in .whl/ when
# the machine lacks it (else scikit-learn's vendored copy). Test it first on the CPU:
#   python benchmarks/device_check.py --device cpu --sentences 120 --shapes tiny --batch-size 16
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HDF5_USE_FILE_LOCKING=FALSE
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 380 python3 benchmarks/device_check.py --sentences "${SENTENCES:-25088}" "$@"
# the similarity stage of the default run on the GPU: synthetic layers of its shapes at 20,000 rows, both variants,
# every measure; the across grid of 2 x 2 layers against numpy's float64 (exit 1 beyond 1e-5)
PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} timeout 90 python3 benchmarks/bench_similarity.py --rows 20000 --device cuda:0 --check
