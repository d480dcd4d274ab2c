# Sourced by tests/s3/run.sh, tests/slurm/run.sh, tests/kubernetes/run.sh and tests/reference_run.sh: a moto S3
# server on loopback, the smoke configs, the local reference run. Needs PY (the venv's python), PROJECT, WORK, say().

# moto's S3 server on 127.0.0.1 and a free port; MOTO_PID and MOTO_URL are set, its log is $WORK/moto.log.
start_moto() {
  local port
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$(dirname "$PY")/moto_server" -H 127.0.0.1 -p "$port" > "$WORK/moto.log" 2>&1 &
  MOTO_PID=$!
  MOTO_URL="http://127.0.0.1:$port"
  for _ in $(seq 50); do
    curl -s -o /dev/null "$MOTO_URL" && return 0
    kill -0 "$MOTO_PID" 2>/dev/null || { cat "$WORK/moto.log"; echo "moto_server did not start: see above"; return 1; }
    sleep 0.2
  done
  echo "moto_server not answering on $MOTO_URL after 10 s"; return 1
}

# moto ignores SIGTERM while a request is open: SIGKILL after 3 s.
stop_moto() {
  [ -n "${MOTO_PID:-}" ] || return 0
  kill "$MOTO_PID" 2>/dev/null || true
  for _ in $(seq 15); do kill -0 "$MOTO_PID" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$MOTO_PID" 2>/dev/null || true
  wait "$MOTO_PID" 2>/dev/null || true
  MOTO_PID=""
}

# DIR/smoke.yaml: the smoke config's tiny-gpt2 (one model: every rule, half the jobs) in 2 shards, with the data
# folders absolute (local) or relative (remote: the default storage provider maps them into the bucket).
smoke_config() {
  mkdir -p "$1"
  "$PY" - "$PROJECT" "$1" "$2" <<'PYEOF'
import sys
from pathlib import Path
import yaml
project, folder, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
config = yaml.safe_load((project / "config" / "smoke.yaml").read_text())
config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}
config["extraction"]["n_shards"] = 2  # two shard jobs a corpus show the sharding as well as four, in fewer jobs
data = project / "resources" if where == "local" else Path("resources")
config["corpus"]["bundled_dir"] = str(data / "sts")
config["static"] = {"benchmark_dir": str(data / "benchmarks")}
(folder / "smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PYEOF
}

# $WORK/local/smoke.yaml for the local reference run, or, given REFERENCE_RUN, a check that it is a finished one
# (before any run starts).
local_config() {
  if [ -z "${REFERENCE_RUN:-}" ]; then smoke_config "$WORK/local" local; return; fi
  [ -f "$REFERENCE_RUN/.complete" ] || { echo "REFERENCE_RUN=$REFERENCE_RUN is not a finished run of tests/reference_run.sh: unset it, or make it first"; return 1; }
}

# $WORK/remote/smoke.yaml and the local reference run's (local_config).
smoke_configs() {
  smoke_config "$WORK/remote" remote
  local_config
}

# The inputs a bucket would hold, uploaded under s3://BUCKET/PREFIX/resources/.
fill_bucket() {
  for folder in sts benchmarks; do
    "$PY" "$PROJECT/tests/s3/bucket.py" put "$MOTO_URL" "$1" "$PROJECT/resources/$folder" "resources/$folder"
  done
}

# The local reference run of DIR/smoke.yaml in DIR, --cores 1, its log DIR.log (tests/reference_run.sh).
local_run() {
  ( cd "$1" && exec timeout -k 15 "${TIMEOUT:-900}" "$PY" -m snakemake --snakefile "$PROJECT/Snakefile" \
      --directory "$1" --configfile smoke.yaml --cores 1 --workflow-profile none > "$1.log" 2>&1 )
}

# The local reference run, in the background (LOCAL_PID), in LOCAL. REFERENCE_RUN, a finished one that
# tests/reference_run.sh made (CI makes one for every proof while its fast tier runs), stands in for it.
start_local_run() {
  if [ -n "${REFERENCE_RUN:-}" ]; then
    LOCAL="$REFERENCE_RUN"
    ( exit 0 ) &
  else
    LOCAL="$WORK/local"
    local_run "$LOCAL" &
  fi
  LOCAL_PID=$!
}

# Wait for the run under test (NAME PID LOG) and the local reference run; a failed one: its log's tail, exit 1.
wait_beside_local_run() {
  local name=$1 pid=$2 log=$3 rc local_rc
  set +e
  wait "$pid"; rc=$?
  wait "$LOCAL_PID"; local_rc=$?; LOCAL_PID=""
  set -e
  say "$name run exit $rc, local run exit $local_rc"
  if [ "$rc" != 0 ]; then tail -60 "$log"; exit 1; fi
  if [ "$local_rc" != 0 ]; then tail -60 "$LOCAL.log"; exit 1; fi
}

# Nothing but Snakemake's own folder and the config in the submitting work folder: every output went to the bucket.
check_workdir_clean() {
  local extra
  extra=$(cd "$1" && ls -A | grep -v -x -e .snakemake -e smoke.yaml || true)
  [ -z "$extra" ] || { echo "FAIL: written to the work folder $1: $extra"; return 1; }
  echo "ok: nothing written to the work folder but .snakemake/ (Snakemake's own records and local copies)"
}
