#!/usr/bin/env bash
# A one-machine Slurm cluster for trying chaosbed's Slurm path and for its tests: munged with its own key,
# slurmctld and slurmd, every file under DIR, nothing in /etc touched.
#   local-cluster.sh start DIR   starts it in DIR (new or empty; ports picked free) and waits until the node is idle; prints
#                                `export SLURM_CONF=DIR/slurm.conf`, which every Slurm command then needs
#   local-cluster.sh stop DIR    stops the daemons (their logs stay in DIR)
# Needs root (slurmd runs jobs as their user) and Debian's slurm-wlm and munge packages
# (scripts/install-deps.sh --with-slurm). Exit: 0 started/stopped, 1 failed (the daemons' logs are in DIR), 4
# it cannot run here (Slurm or munge not installed, not root).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$(realpath -m "$2")

stop() {
  for name in slurmd slurmctld munged; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    # Only a process whose command is this daemon: a stale pid file may name someone else by now.
    if [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) usage ;;
esac

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || { echo "local-cluster: $tool not found: scripts/install-deps.sh --with-slurm" >&2; exit 4; }
done
[ "$(id -u)" -eq 0 ] || { echo "local-cluster: slurmd must run as root" >&2; exit 4; }

# A free TCP port on loopback, from the kernel.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A fresh directory of our own: as root, never write through a symlink or into files someone else prepared.
if [ -L "$dir" ] || { [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; }; then
  echo "local-cluster: $dir exists and is not an empty directory (stop the old cluster and remove it first)" >&2
  exit 1
fi
mkdir -p "$dir"/{state,spool,munge}
chmod 0700 "$dir" "$dir/munge"
# munged refuses a key that others can read, and so should we: it signs every Slurm message.
(umask 077; head -c 1024 /dev/urandom >"$dir/munge/munge.key")
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
cat >"$dir/slurm.conf" <<CONF
ClusterName=chaosbed-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
# Bind to the node's address (127.0.0.1 below), not to every interface.
CommunicationParameters=NoInAddrAny
ReturnToService=2
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf

trap 'echo "local-cluster: start failed; logs in $dir" >&2; stop' ERR
# --force: munged wants its socket reachable by every user (as /run/munge is); this one sits in a private
# directory on purpose, since only root uses this cluster.
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed" --force
slurmctld -i
slurmd
# Up when the node reports idle; slurmd registers within seconds.
for _ in $(seq 300); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && { echo "export SLURM_CONF=$dir/slurm.conf"; exit 0; }
  sleep 0.1
done
echo "local-cluster: node $host did not become idle within 30 s (state: ${state:-none})" >&2
false
