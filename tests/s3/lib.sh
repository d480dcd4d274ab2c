# Sourced by tests/s3/run.sh, tests/kubernetes/run.sh and tests/slurm/run.sh: a moto S3 server on loopback, the
# smoke configs, the local reference run. Needs PY (the venv's python), PROJECT, WORK and say().

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

# $WORK/local/smoke.yaml (absolute data folders) and $WORK/remote/smoke.yaml (the data folders as
# relative paths, which the default storage provider maps into the bucket): the smoke config's tiny-gpt2.
smoke_configs() {
  mkdir -p "$WORK/local" "$WORK/remote"
  "$PY" - "$PROJECT" "$WORK" <<'PYEOF'
import sys
from pathlib import Path
import yaml
project, work = Path(sys.argv[1]), Path(sys.argv[2])
config = yaml.safe_load((project / "config" / "smoke.yaml").read_text())
config["models"] = {"tiny-gpt2": config["models"]["tiny-gpt2"]}  # one model: every rule, half the jobs
config["corpus"]["bundled_dir"] = str(project / "resources" / "sts")
config["static"] = {"benchmark_dir": str(project / "resources" / "benchmarks")}
(work / "local" / "smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
config["corpus"]["bundled_dir"] = "resources/sts"
config["static"] = {"benchmark_dir": "resources/benchmarks"}
(work / "remote" / "smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PYEOF
}

# The inputs a bucket would hold, uploaded under s3://BUCKET/PREFIX/resources/.
fill_bucket() {
  for folder in sts benchmarks; do
    "$PY" "$PROJECT/tests/s3/bucket.py" put "$MOTO_URL" "$1" "$PROJECT/resources/$folder" "resources/$folder"
  done
}

# The local reference run, in the background: LOCAL_PID.
start_local_run() {
  ( cd "$WORK/local" && exec timeout -k 15 "${TIMEOUT:-900}" "$PY" -m snakemake --snakefile "$PROJECT/Snakefile" \
      --directory "$WORK/local" --configfile smoke.yaml --cores 1 --workflow-profile none > "$WORK/local.log" 2>&1 ) &
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
  if [ "$local_rc" != 0 ]; then tail -60 "$WORK/local.log"; exit 1; fi
}

# Nothing but Snakemake's own folder and the config in the submitting work folder: every output went to the bucket.
check_workdir_clean() {
  local extra
  extra=$(cd "$1" && ls -A | grep -v -x -e .snakemake -e smoke.yaml || true)
  [ -z "$extra" ] || { echo "FAIL: written to the work folder $1: $extra"; return 1; }
  echo "ok: nothing written to the work folder but .snakemake/ (Snakemake's own records and local copies)"
}
