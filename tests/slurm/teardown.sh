#!/usr/bin/env bash
# Stop the daemons setup.sh started, each by the PID in its pid file (no pkill/killall), in the order
# slurmd, slurmctld, slurmdbd, MariaDB, munged. --slurm-only stops the three SLURM daemons only.
stop() {  # $1 = pid file
  [ -s "$1" ] || return 0
  local pid; pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$1"; return 0
}
stop /run/slurm/slurmd.pid
stop /run/slurm/slurmctld.pid
stop /run/slurm/slurmdbd.pid
[ "${1:-}" = "--slurm-only" ] && exit 0
stop /run/mysqld/mysqld.pid
stop /run/munge/munged.pid
exit 0
