#!/usr/bin/env bash
# The proofs' local reference run, made once: the smoke config's tiny-gpt2 in DIR (tests/s3/lib.sh), marked
# finished by DIR/.complete. tests/s3/run.sh and tests/slurm/run.sh compare with it given REFERENCE_RUN=DIR,
# instead of each running its own beside its S3 or SLURM run (.ci/run makes it while the fast tier runs).
#
#   tests/reference_run.sh DIR [VENV]        (VENV defaults to the project's .venv)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROJECT="$(cd "$HERE/.." && pwd)"
DIR="$(mkdir -p "$1" && cd "$1" && pwd)"
VENV="$(cd "${2:-$PROJECT/.venv}" && pwd)"
PY="$VENV/bin/python"
TIMEOUT="${REFERENCE_TIMEOUT:-1800}"   # about 2 minutes on 2 idle cores; 15 on a machine loaded 20-fold
source "$HERE/s3/lib.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
rm -f "$DIR/.complete"
smoke_config "$DIR" local
local_run "$DIR" || { tail -60 "$DIR.log"; exit 1; }
touch "$DIR/.complete"
