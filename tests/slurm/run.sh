#!/usr/bin/env bash
# Proof on a real scheduler: the smoke pipeline through SLURM equals a local run.
#
#   tests/slurm/run.sh [VENV]        (as root on Debian 12; VENV defaults to the project's .venv)
#
# 1. installs Debian's slurm-wlm daemons, munge and MariaDB (for slurmdbd, so sacct works) and starts
#    a one-node cluster on localhost with 2 fake GPUs (tests/slurm/setup.sh);
# 2. pip-installs snakemake-executor-plugin-slurm into VENV;
# 3. runs the smoke config (its tiny random GPT-2, 120 sentences, 2 shards) twice in temp workdirs:
#    locally (`--cores 1`, device cpu; or REFERENCE_RUN, tests/reference_run.sh) and on SLURM (`--profile profiles/slurm --workflow-profile none`,
#    device cuda on fake GPUs: the test hook TEST_FAKE_GPUS (tests/hooks/sitecustomize.py) computes on the
#    CPU but records the device each shard chose, its CUDA_VISIBLE_DEVICES and SLURM job id);
# 4. asserts that every non-local job went through sbatch (sacct lists it, COMPLETED), that each
#    extraction job got its own GPU from SLURM and used cuda:0, and that the outputs equal the local
#    run's (tests/slurm/compare.py);
# 5. stops the daemons (tests/slurm/teardown.sh) and removes the workdirs (KEEP=1 keeps both).
# Exit status 0 = pass. About 5 minutes on 2 cores (289 s measured; most of it SLURM polling and job
# start-up), plus ~35 s for apt-get and pip the first time.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROJECT="$(cd "$HERE/../.." && pwd)"
VENV="$(cd "${1:-$PROJECT/.venv}" && pwd)"   # absolute: the runs cd into their workdirs
PY="$VENV/bin/python"
TIMEOUT="${SLURM_TEST_TIMEOUT:-900}"
START=$(date +%s)
WORK="$(mktemp -d /tmp/contextuality-slurm.XXXXXX)"
LOCAL_PID=""
SLURM_PID=""
say() { echo "[slurm-test $(( $(date +%s) - START ))s] $*"; }
source "$PROJECT/tests/s3/lib.sh"   # the local reference run and the wait beside it

cleanup() {
  rc=$?
  [ -n "$LOCAL_PID" ] && kill "$LOCAL_PID" 2>/dev/null || true
  [ -n "$SLURM_PID" ] && kill "$SLURM_PID" 2>/dev/null && wait "$SLURM_PID" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then
    "$HERE/teardown.sh"
    rm -rf "$WORK"
  else
    say "KEEP=1: daemons left running, workdirs in $WORK"
  fi
  say "finished with status $rc"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "run as root (installs packages, starts daemons)"; exit 2; }
[ -x "$PY" ] || { echo "no python in $VENV"; exit 2; }

say "starting a one-node SLURM cluster"
FAKE_GPUS=2 "$HERE/setup.sh"

if ! "$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null; then
  say "installing snakemake-executor-plugin-slurm into $VENV"
  "$PY" -m pip install --quiet "snakemake-executor-plugin-slurm==2.8.0"
fi

# --- configs: the smoke config with absolute paths; the SLURM run asks for (fake) GPUs -------------
source "$PROJECT/tests/s3/lib.sh"
local_config
smoke_config "$WORK/slurm" local
# one GPU per shard job, from SLURM's GRES
"$PY" -c 'import sys, yaml; p = sys.argv[1]; c = yaml.safe_load(open(p)); c["extraction"]["device"] = "cuda"
open(p, "w").write(yaml.safe_dump(c, sort_keys=False))' "$WORK/slurm/smoke.yaml"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HDF5_USE_FILE_LOCKING=FALSE

# Both runs start from nothing: the random models' tokenizers and weights are deterministic, so the
# local reference run builds the same models as the SLURM run, and every output can be compared.
say "SLURM run: --profile profiles/slurm --workflow-profile none (background)"
( cd "$WORK/slurm" && PYTHONPATH="$PROJECT/tests/hooks" TEST_FAKE_GPUS=2 exec timeout -k 15 "$TIMEOUT" "$PY" -m snakemake \
    --snakefile "$PROJECT/Snakefile" --directory "$WORK/slurm" --configfile smoke.yaml \
    --profile "$PROJECT/profiles/slurm" --workflow-profile none \
    --slurm-init-seconds-before-status-checks 2 > "$WORK/slurm.log" 2>&1 ) &
SLURM_PID=$!
say "local reference run (background)"
start_local_run
wait_beside_local_run SLURM "$SLURM_PID" "$WORK/slurm.log"
SLURM_PID=""

# --- every non-local job went through sbatch -------------------------------------------------------
RUN=$(grep -oP 'SLURM run ID: \K\S+' "$WORK/slurm.log" | head -1)
[ -n "$RUN" ] || { echo "no 'SLURM run ID' in the log"; exit 1; }
# slurmctld hands finished jobs to slurmdbd through a queue, which a loaded machine drains late: wait (up to
# 3 minutes) until sacct lists as many jobs as the run submitted.
SUBMITTED=$(grep -cE '^(rule|checkpoint) \w+:' "$WORK/slurm.log" || true)
for _ in $(seq 36); do
  sacct -X -n -P --name "$RUN" -o JobID,Comment,State,ExitCode > "$WORK/sacct.txt"
  [ "$(wc -l < "$WORK/sacct.txt")" -ge "$SUBMITTED" ] && break
  sleep 5
done
say "sacct lists $(wc -l < "$WORK/sacct.txt") jobs of run $RUN"
"$PY" "$HERE/compare.py" --slurm-log "$WORK/slurm.log" --sacct "$WORK/sacct.txt" \
    --local "$LOCAL" --slurm "$WORK/slurm"
say "PASS in $(( $(date +%s) - START )) s"
