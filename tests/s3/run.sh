#!/usr/bin/env bash
# S3 storage: the smoke pipeline with no shared filesystem (--shared-fs-usage none) and every input and
# output in an S3 bucket (a moto server on 127.0.0.1) equals a local run.
#
#   tests/s3/run.sh [VENV]        (VENV defaults to the project's .venv)
#
# 1. pip-installs snakemake-storage-plugin-s3 and moto[server] into VENV (envs/constraints.txt);
# 2. starts moto_server on 127.0.0.1 and a free port, and uploads the smoke config's data folders;
# 3. runs the smoke config's tiny-gpt2 twice, at once: locally (or takes REFERENCE_RUN, tests/reference_run.sh),
#    and with --default-storage-provider s3;
# 4. asserts that the S3 run wrote nothing to its work folder and that the bucket's results/ equal the
#    local run's (tests/slurm/compare.py: HDF5 datasets and attributes, every other file byte for byte);
# 5. stops moto by PID and removes the workdirs (KEEP=1 keeps them).
# Exit status 0 = pass.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROJECT="$(cd "$HERE/../.." && pwd)"
VENV="$(cd "${1:-$PROJECT/.venv}" && pwd)"
PY="$VENV/bin/python"
TIMEOUT="${S3_TEST_TIMEOUT:-1800}"   # 259 s in CI, 636 s measured on a loaded 2-core machine
START=$(date +%s)
WORK="$(mktemp -d /tmp/contextuality-s3.XXXXXX)"
LOCAL_PID="" S3_PID="" MOTO_PID=""
say() { echo "[s3-test $(( $(date +%s) - START ))s] $*"; }
source "$HERE/lib.sh"

cleanup() {
  rc=$?
  [ -n "$LOCAL_PID" ] && kill "$LOCAL_PID" 2>/dev/null || true
  [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null || true
  stop_moto
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else say "KEEP=1: workdirs in $WORK"; fi
  say "finished with status $rc"
}
trap cleanup EXIT
trap "exit 143" TERM INT   # so that a stopped test still cleans up

if ! "$PY" -c "import snakemake_storage_plugin_s3, moto" 2>/dev/null; then
  say "installing snakemake-storage-plugin-s3 and moto[server] into $VENV"
  "$PY" -m pip install --quiet -e "$PROJECT[s3test]" -c "$PROJECT/envs/constraints.txt" 2>&1 | grep -v "^WARNING: Location" || true
  "$PY" -c "import snakemake_storage_plugin_s3, moto"
fi

start_moto
BUCKET=s3://contextuality-ci/smoke
fill_bucket "$BUCKET"
smoke_configs
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# any credentials: moto accepts them; the plugin insists on some
export SNAKEMAKE_STORAGE_S3_ACCESS_KEY=testing SNAKEMAKE_STORAGE_S3_SECRET_KEY=testing

say "S3 run: --shared-fs-usage none --default-storage-provider s3 against $MOTO_URL (background)"
( cd "$WORK/remote" && exec timeout -k 15 "$TIMEOUT" "$PY" -m snakemake --snakefile "$PROJECT/Snakefile" \
    --directory "$WORK/remote" --configfile smoke.yaml --cores 1 --workflow-profile none \
    --shared-fs-usage none --default-storage-provider s3 --default-storage-prefix "$BUCKET" \
    --storage-s3-endpoint-url "$MOTO_URL" > "$WORK/s3.log" 2>&1 ) &
S3_PID=$!
say "local reference run (background)"
start_local_run
wait_beside_local_run S3 "$S3_PID" "$WORK/s3.log"
S3_PID=""

check_workdir_clean "$WORK/remote"
"$PY" "$HERE/bucket.py" get "$MOTO_URL" "$BUCKET" "$WORK/bucket"
"$PY" "$HERE/bucket.py" compare "$LOCAL" "$WORK/bucket"
say "PASS in $(( $(date +%s) - START )) s"
