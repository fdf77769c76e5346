#!/usr/bin/env bash
# Slurm across the namespace hosts of hosts.sh: one munged (the machine's, a socket under D),
# slurmctld on coord, one slurmd per host under its own name and address, and the partitions
# coord (coord), a (a1,a2) and b (b1,b2). Configuration, state, spools and logs live under
# D/slurm and D/munge; every daemon and directory is recorded in D/state as it is made (group
# "slurm"), so `slurm.sh down` or `hosts.sh down` removes exactly them, after cancelling the
# cluster's jobs. Needs root and a fleet made by `hosts.sh up --dir=D`.
#
# Usage:
#   slurm.sh up [--dir=D]      then: hosts.sh exec --dir=D coord -- sbatch -p a -N 2 ...
#   slurm.sh down [--dir=D]
# slurmd runs in its host's network and UTS namespaces entered with nsenter (not `ip netns
# exec`, whose fresh /sys mount hides the cgroup file system slurmd looks for).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=deploy/hosts/lib.sh
. "$here/lib.sh"
HOSTS_DIR=${HOSTS_DIR:-/tmp/diloco-hosts}

cmd=${1:-}
shift || true
for a in "$@"; do
  case $a in
    --dir=*) HOSTS_DIR=${a#*=} ;;
    *) die "unknown argument $a" ;;
  esac
done
[[ -f $HOSTS_DIR/state ]] || die "no fleet in $HOSTS_DIR (hosts.sh up --dir=$HOSTS_DIR first)"
HOSTS_DIR=$(cd "$HOSTS_DIR" && pwd)
s=$HOSTS_DIR/slurm
m=$HOSTS_DIR/munge
conf=$s/slurm.conf

wait_for() {  # seconds, description, command...
  local n=$1 what=$2 i
  shift 2
  for ((i = 0; i < n * 2; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "$what (logs in $s/log)"
}

write_conf() {
  local hw h
  # This machine's hardware as slurmd sees it; every host reports the same.
  hw=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *UpTime=.*//')
  [[ $hw == *CPUs=* ]] || die "slurmd -C gave '$hw'"
  cat >"$conf" <<EOF
# Written by deploy/hosts/slurm.sh for the namespace hosts of $HOSTS_DIR
ClusterName=diloco-hosts
SlurmctldHost=coord($(host_field coord 4))
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$m/munge.socket.2
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$s/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=10
EOF
  while read -r h; do
    echo "NodeName=$h NodeAddr=$(host_field "$h" 4) $hw State=UNKNOWN" >>"$conf"
  done < <(hosts_list)
  cat >>"$conf" <<EOF
PartitionName=coord Nodes=coord MaxTime=INFINITE State=UP
PartitionName=a Nodes=a1,a2 MaxTime=INFINITE State=UP
PartitionName=b Nodes=b1,b2 MaxTime=INFINITE State=UP
EOF
  : >"$s/plugstack.conf"
}

nodes_idle() {
  local states
  states=$(on_host coord sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
  [[ $(grep -c ' idle$' <<<"$states") -eq $(hosts_list | wc -l) ]]
}

up() {
  local h pid
  ((EUID == 0)) || die "run as root"
  for h in munged slurmctld slurmd sbatch; do
    command -v $h >/dev/null || die "$h missing (apt-get install slurm-wlm munge)"
  done
  [[ -n $(host_field coord 5) ]] || die "no host coord in $HOSTS_DIR/state"
  grep -q '^slurm ' "$HOSTS_DIR/state" && teardown slurm
  mkdir -p "$m" "$s"
  record "slurm dir $m"
  record "slurm dir $s"
  mkdir -p "$s/state" "$s/log" "$s/spool"
  chmod 755 "$m"  # munged wants its socket's directory searchable by all
  dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
  chmod 400 "$m/munge.key"
  setsid munged -F --key-file="$m/munge.key" --socket="$m/munge.socket.2" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed" \
    </dev/null >/dev/null 2>&1 &
  record_proc slurm $! munged
  wait_for 10 "munged did not start" sh -c \
    "munge -S '$m/munge.socket.2' -n | unmunge -S '$m/munge.socket.2'"
  write_conf
  export SLURM_CONF=$conf
  pid=$(host_field coord 5)
  setsid nsenter -t "$pid" --net --uts slurmctld -D -i -f "$conf" </dev/null \
    >"$s/log/slurmctld.out" 2>&1 &
  record_proc slurm $! slurmctld
  wait_for 30 "slurmctld does not answer" on_host coord scontrol ping
  while read -r h; do
    pid=$(host_field "$h" 5)
    setsid nsenter -t "$pid" --net --uts slurmd -D -f "$conf" -N "$h" </dev/null \
      >"$s/log/slurmd-$h.out" 2>&1 &
    record_proc slurm $! "slurmd-$h"
  done < <(hosts_list)
  record "slurm slurm $conf"
  wait_for 60 "not every node is idle: $(on_host coord sinfo -h -N -o '%N %t' | xargs)" nodes_idle
  echo "slurm.sh: up: SLURM_CONF=$conf; partitions coord a b:"
  on_host coord sinfo -o '%P %D %N %t'
}

case $cmd in
  up)
    # shellcheck disable=SC2154  # rc is the trap's own
    trap 'rc=$?; trap - EXIT INT TERM; ((rc == 0)) || { echo "slurm.sh: up failed; stopping what it started" >&2; teardown slurm; }; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    ;;
  down)
    trap '' INT TERM
    teardown slurm
    ;;
  *) die "usage: slurm.sh up|down [--dir=D]" ;;
esac
