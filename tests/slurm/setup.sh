#!/usr/bin/env bash
# Start a one-node SLURM cluster on localhost (Debian 12, root, no systemd needed): munge, MariaDB +
# slurmdbd (so that plain `sacct` works, as on a real cluster and as the Snakemake SLURM plugin
# expects), slurmctld and slurmd, with FAKE_GPUS fake GPUs as GRES (SLURM then sets
# CUDA_VISIBLE_DEVICES for jobs that ask for --gpus).
# Idempotent: a second call reuses running munge/MariaDB and restarts the SLURM daemons on a clean state.
#   FAKE_GPUS   fake GPUs on the node (default 2; 0 = no GRES)
#   NODE_CPUS   CPUs the node advertises (default: max(nproc, 8); more than the machine has is fine
#               with SlurmdParameters=config_overrides, and lets the slurm profile's cpus_per_gpu fit)
set -euo pipefail
FAKE_GPUS="${FAKE_GPUS:-2}"
NODE_CPUS="${NODE_CPUS:-$(( $(nproc) > 8 ? $(nproc) : 8 ))}"
export DEBIAN_FRONTEND=noninteractive
HERE="$(cd "$(dirname "$0")" && pwd)"

# Start a daemon with /dev/null stdio and no other inherited descriptor: a daemon that keeps the
# caller's stdout pipe open would make `setup.sh | tail` (or any captured run) wait forever.
start_daemon() {
  ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
    exec "$@" </dev/null >/dev/null 2>&1 )
}

# --- packages (Debian's; --no-install-recommends avoids ~30 -dev plugin packages) -------------------
pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
missing=""
for p in $pkgs; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"; done
if [ -n "$missing" ]; then
  apt-get update -q >/tmp/slurm-apt.log 2>&1
  apt-get install -y -q --no-install-recommends $missing >>/tmp/slurm-apt.log 2>&1
fi

# SLURM daemons left over from an earlier run are restarted on a clean state (job ids restart at 1).
"$HERE/teardown.sh" --slurm-only

# --- munge (must run as the munge user; the postinst wrote the key) --------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 755 /run/munge
install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid /run/munge/munge.socket.2*
  start_daemon runuser -u munge -- /usr/sbin/munged
  for i in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
fi
munge -n | unmunge >/dev/null

# --- slurm.conf -------------------------------------------------------------------------------------
HOST=$(hostname -s)
MEM=$(( $(free -m | awk '/^Mem:/{print $2}') - 1024 ))
install -d /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
GRES_NODE=""; GRES_TYPES=""
if [ "$FAKE_GPUS" -gt 0 ]; then
  # GRES files must be character devices (regular files are rejected and no CUDA_VISIBLE_DEVICES is set)
  install -d /var/spool/fakegpu
  for i in $(seq 0 $((FAKE_GPUS-1))); do
    [ -c /var/spool/fakegpu/nvidia$i ] || mknod /var/spool/fakegpu/nvidia$i c 195 $i
  done
  echo "NodeName=${HOST} Name=gpu File=/var/spool/fakegpu/nvidia[0-$((FAKE_GPUS-1))]" > /etc/slurm/gres.conf
  GRES_NODE="Gres=gpu:${FAKE_GPUS}"; GRES_TYPES="GresTypes=gpu"
else
  rm -f /etc/slurm/gres.conf
fi
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=localcluster
SlurmctldHost=${HOST}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStoreFlags=job_comment
MinJobAge=300
${GRES_TYPES}
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${NODE_CPUS} RealMemory=${MEM} ${GRES_NODE} State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
CONF

# --- MariaDB + slurmdbd ---------------------------------------------------------------------------
install -d -o mysql -g mysql /run/mysqld
if ! mysqladmin ping >/dev/null 2>&1; then
  (cd / && start_daemon setsid -f /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid \
      --bind-address=127.0.0.1 --log-error=/var/log/slurm/mariadbd.log)
  for i in $(seq 150); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
          CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chmod 600 /etc/slurm/slurmdbd.conf
start_daemon slurmdbd
for i in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done

# --- slurmctld + slurmd (same slurm.conf for both) -----------------------------------------------
start_daemon slurmctld
start_daemon slurmd
for i in $(seq 150); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.2
done
sinfo -N -o "%N %T %c %m %G"
[ "$(sinfo -h -o %T)" = idle ]
