#!/usr/bin/env bash
# Manual check of deploy/slurm/diloco.sbatch on a throwaway single-node Slurm cluster on this
# machine (not part of CI). It installs slurm-wlm and munge with apt when missing, writes a
# one-node configuration and a private munge key under a scratch directory, starts munged,
# slurmctld and slurmd there (own socket, free ports, no systemd, nothing under /etc touched),
# submits the recipe with a short duration, waits for it with a time limit, checks the job state,
# the logs and the exported model, and stops the daemons by the PIDs it recorded. The recipe's
# shards bind every address, so they run with the CURVE keys it makes (run/keys): checked too.
# Needs root (slurmd) and a build of diloco-server, diloco-worker and diloco-ctl (built into
# DILOCO_BUILD when missing).
#
# Usage: deploy/slurm/check-single-node.sh
# Environment (optional):
#   DILOCO_BUILD      build directory (default build/release; built there when missing)
#   CHECK_DIR         scratch directory (default: a new /tmp/diloco-slurm-check.XXXXXX); a
#                     directory of an earlier check is reused: its leftover daemons are stopped
#                     and its contents replaced
#   CHECK_DURATION    training seconds (default 30)
#   CHECK_SHARDS      shards (default 2)
#   CHECK_WORKER_ARGS extra worker flags (default --inner_steps=10, so that a short run pushes
#                     and the shards close rounds; the flag file's H=100 needs minutes on CPU)
#   CHECK_RECIPE      batch script to submit (default deploy/slurm/diloco.sbatch)
#   CHECK_KEEP=1      keep the scratch directory after a successful check (always kept on failure)
# Exit status: 0 when every check passed, 1 otherwise.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DILOCO_BUILD:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
duration=${CHECK_DURATION:-30}
shards=${CHECK_SHARDS:-2}
worker_args=${CHECK_WORKER_ARGS---inner_steps=10}
recipe=${CHECK_RECIPE:-deploy/slurm/diloco.sbatch}

log() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

((EUID == 0)) || fail "run as root (slurmd needs it)"
[[ $duration =~ ^[0-9]+$ ]] || fail "CHECK_DURATION must be a number of seconds"

# --- packages and build -----------------------------------------------------------------------
if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null ||
  ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q slurm-wlm munge
fi
if [[ ! -x $build/server/diloco-server || ! -x $build/worker/diloco-worker ||
  ! -x $build/ctl/diloco-ctl ]]; then
  log "building into $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$build" diloco-server diloco-worker diloco-ctl
fi

# --- scratch directory ------------------------------------------------------------------------
marker=.diloco-slurm-check
# The PID in pid file $1, if that process runs and was started with this directory.
pid_ours() {
  local pid
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" || return 1
  echo "$pid"
}
stop_pidfile() {
  local pid i
  if pid=$(pid_ours "$1"); then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}
# Cancels the jobs of this cluster (their steps end only through slurmd), then stops the daemons.
stop_daemons() {
  local ids i
  if [[ -f $dir/slurm.conf ]] && pid_ours "$dir/slurmctld.pid" >/dev/null &&
    pid_ours "$dir/slurmd.pid" >/dev/null; then
    ids=$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null || true)
    if [[ -n $ids ]]; then
      echo "== cancelling jobs ${ids//$'\n'/ }"
      # shellcheck disable=SC2086
      SLURM_CONF=$dir/slurm.conf scancel $ids 2>/dev/null || true
      for ((i = 0; i < 60; i++)); do
        [[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null) ]] && break
        sleep 1
      done
    fi
  fi
  stop_pidfile "$dir/slurmd.pid"
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munge/munged.pid"
}

if [[ -n ${CHECK_DIR:-} ]]; then
  dir=$CHECK_DIR
  if [[ -d $dir && -n $(ls -A "$dir") ]]; then
    [[ -e $dir/$marker ]] || fail "CHECK_DIR=$dir is not empty and not a directory of this check"
    log "reusing $dir: stopping leftover daemons"
    stop_daemons
    find "$dir" -mindepth 1 -delete
  fi
  mkdir -p "$dir"
else
  dir=$(mktemp -d /tmp/diloco-slurm-check.XXXXXX)
fi
dir=$(cd "$dir" && pwd)
chmod 755 "$dir"
touch "$dir/$marker"
log "scratch directory: $dir"

ok=0
cleanup() {
  stop_daemons
  if ((ok)) && [[ ${CHECK_KEEP:-0} != 1 ]]; then
    rm -rf "$dir"
  else
    echo "== kept $dir (slurm.conf, log/, run/, job.out)"
  fi
}
trap cleanup EXIT

# A port nothing listens on (bash's /dev/tcp: a refused connection means free).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_ports() {  # $1 consecutive free ports, printed as the first one
  local p n i ok_run
  for ((n = 0; n < 200; n++)); do
    p=$((20000 + RANDOM % 30000))
    ok_run=1
    for ((i = 0; i < $1; i++)); do port_free $((p + i)) || { ok_run=0; break; }; done
    ((ok_run)) && { echo "$p"; return 0; }
  done
  return 1
}
ctld_port=$(pick_ports 2) || fail "no free ports"
slurmd_port=$((ctld_port + 1))
diloco_port=$(pick_ports "$shards") || fail "no free ports"
# Keep the shard ports clear of the daemons' pair.
while ((diloco_port + shards > ctld_port && diloco_port <= slurmd_port)); do
  diloco_port=$(pick_ports "$shards") || fail "no free ports"
done

# --- munge ------------------------------------------------------------------------------------
mkdir -p "$dir/munge"
chmod 755 "$dir/munge"  # munged wants the socket's directory searchable by all
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket.2" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed"
munge -S "$dir/munge/munge.socket.2" -n | unmunge -S "$dir/munge/munge.socket.2" >/dev/null ||
  fail "munge does not work (see $dir/munge/munged.log)"
log "munged pid $(<"$dir/munge/munged.pid")"

# --- slurm.conf -------------------------------------------------------------------------------
host=$(hostname -s)
# This machine's hardware as slurmd sees it (CPUs, sockets, cores, threads, RealMemory).
hw=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *UpTime=.*//')
[[ $hw == *CPUs=* && $hw == *RealMemory=* ]] || fail "slurmd -C gave '$hw'"
mkdir -p "$dir/state" "$dir/spool" "$dir/log"
cat >"$dir/slurm.conf" <<EOF
# Single-node test cluster written by deploy/slurm/check-single-node.sh
ClusterName=diloco-check
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
: >"$dir/plugstack.conf"
export SLURM_CONF=$dir/slurm.conf

# --- daemons ----------------------------------------------------------------------------------
wait_pidfile() {
  local i
  for ((i = 0; i < 40; i++)); do [[ -s $1 ]] && kill -0 "$(<"$1")" 2>/dev/null && return 0; sleep 0.5; done
  return 1
}
slurmctld -f "$SLURM_CONF" -i
wait_pidfile "$dir/slurmctld.pid" || fail "slurmctld did not start (see $dir/log/slurmctld.log)"
slurmd -f "$SLURM_CONF"
wait_pidfile "$dir/slurmd.pid" || fail "slurmd did not start (see $dir/log/slurmd.log)"
log "slurmctld pid $(<"$dir/slurmctld.pid") port $ctld_port, slurmd pid $(<"$dir/slurmd.pid") port $slurmd_port"
state=""
for ((i = 0; i < 60; i++)); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 1
done
[[ $state == idle ]] || fail "node $host is '$state', not idle (see $dir/log/)"

# --- the job ----------------------------------------------------------------------------------
cd "$root"
job=$(DILOCO_BUILD="$build" DILOCO_RUN="$dir/run" DILOCO_DURATION="${duration}s" \
  DILOCO_SHARDS="$shards" DILOCO_BASE_PORT="$diloco_port" DILOCO_WORKER_ARGS="$worker_args" \
  sbatch --parsable --nodes=1 --output="$dir/job.out" "$recipe")
job=${job%%;*}
log "submitted job $job (duration ${duration}s, $shards shards, shard ports from $diloco_port)"
limit=$((duration + 300))
t0=$SECONDS
jstate=""
while ((SECONDS - t0 < limit)); do
  jstate=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $jstate in PENDING | RUNNING | COMPLETING | CONFIGURING | "") sleep 2 ;; *) break ;; esac
done
exit_code=$(scontrol show job "$job" | sed -n 's/.*[^a-zA-Z]ExitCode=\([0-9:]*\).*/\1/p')
log "job $job: state $jstate, exit code $exit_code after $((SECONDS - t0))s"
echo "---- $dir/job.out"
cat "$dir/job.out" 2>/dev/null || true
echo "----"

# --- checks -----------------------------------------------------------------------------------
errors=0
check() {  # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; errors=$((errors + 1)); fi
}
run=$dir/run
check "job state COMPLETED" test "$jstate" = COMPLETED
check "job exit code 0:0" test "$exit_code" = 0:0
check "recipe reports status 0" grep -q "diloco.sbatch: done, status 0" "$dir/job.out"
for ((s = 0; s < shards; s++)); do
  check "shard $s: final checkpoint written" grep -q "stopping, final checkpoint written" "$run/shard$s.log"
  check "shard $s: closed rounds" grep -qE '"rounds":[1-9]' "$run/shard$s.jsonl"
  check "shard $s: shutdown event" grep -q '"event":"shutdown","final_checkpoint":"written"' "$run/shard$s.jsonl"
done
check "CURVE keys made, secret keys 0600" \
  test "$(stat -c %a "$run/keys/server.secret" 2>/dev/null)" = 600 -a \
  "$(stat -c %a "$run/keys/worker-0.secret" 2>/dev/null)" = 600
for ((s = 0; s < shards; s++)); do
  check "shard $s: served with CURVE" grep -q "CURVE with 1 authorized keys" "$run/shard$s.log"
done
check "worker 0 finished" grep -q "diloco-worker\[0\]: done after" "$run/worker0.log"
check "worker 0 pushes applied" grep -qE '"event":"done".*"applied":[1-9]' "$run/worker0.jsonl"
out=$run/global.safetensors
check "export written" test -s "$out"
safetensors_ok() {  # u64 little-endian header length, then a JSON object, within the file
  local n size
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  size=$(stat -c %s "$1")
  [[ $n =~ ^[0-9]+$ ]] && ((n > 2 && n + 8 <= size)) && [[ $(head -c 9 "$1" | tail -c 1) == "{" ]]
}
check "export is a safetensors file" safetensors_ok "$out"
check "export advanced past the initial model" \
  grep -qE "fragment versions [0-9,]*([2-9]|[1-9][0-9])" "$dir/job.out"
[[ -f $out ]] && log "export: $out, $(stat -c %s "$out") bytes"

if ((errors)); then
  echo "== $errors check(s) failed; logs in $dir (log/, run/, job.out)" >&2
  exit 1
fi
ok=1
log "all checks passed"
