#!/usr/bin/env bash
# The fleet check (as root): namespace hosts (hosts.sh), Slurm across them (slurm.sh), the
# shards on the coordinator (deploy/slurm/shards.sbatch, CURVE), a C++ island on cluster a's two
# nodes and a PyTorch island on cluster b's (deploy/slurm/learner.sbatch), training over the
# shaped links; one rank of the C++ island is SIGKILLed mid-run (its PID from the file its
# launcher recorded, checked against `scontrol listpids`) and the island restarts. Then the
# shards stop, the global model is exported and evaluated. It passes only if:
#   - every learner had pushes applied after the kill;
#   - each island's ranks ended with the same parameter checksum (their JSON event logs);
#   - the export's held-out loss closed at least half the gap from theta(0) to the entropy floor;
#   - a plaintext client and a client with an unknown key were refused by every shard;
#   - no ZeroMQ port on a non-loopback address of any host speaks plaintext (ss, then a ZMTP
#     greeting probe of each listener);
#   - nothing it made is left (namespaces, processes, files under /var, /run, /dev/shm, /etc,
#     /root: only its run directory under /tmp holds its files).
# Prints a PASS/FAIL summary with figures (bytes per link and direction, kill to next applied
# push). Exit status 0 on PASS, 1 on FAIL, 77 when this machine cannot run it.
#
# Usage: deploy/hosts/check-fleet.sh [--short] [--keep]
#   --short   about 2 minutes in all (CI); the default trains about 2 minutes
#   --keep    keep the run directory (always kept on FAIL)
# Environment: DILOCO_BUILD (default build/test), CHECK_LOSS (default 0.001), CHECK_CPP_NODES
# (the C++ island's nodes, default 2; 1 runs it as a single-rank learner).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DILOCO_BUILD:-$root/build/test}
[[ $build = /* ]] || build=$root/$build
short=0 keep=0
for a in "$@"; do
  case $a in
    --short) short=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: check-fleet.sh [--short] [--keep]" >&2; exit 2 ;;
  esac
done
if ((short)); then duration=60 kill_at=20; else duration=120 kill_at=45; fi

log() { echo "== $(date -u +%H:%M:%S) $*"; }
((EUID == 0)) || { echo "skipped: not root"; exit 77; }
why=$("$here/hosts.sh" check) || { echo "$why"; exit 77; }
for b in server/diloco-server worker/diloco-worker ctl/diloco-ctl \
  benchmarks/wan/diloco-wan-delay; do
  [[ -x $build/$b ]] || { echo "FAIL: $build/$b missing (build it)"; exit 1; }
done
[[ -d $build/python/diloco_ps ]] || { echo "FAIL: $build/python/diloco_ps missing"; exit 1; }

run=$(mktemp -d /tmp/diloco-fleet.XXXXXX)
chmod 755 "$run"
touch "$run/.start"  # files made after it outside $run are left-behinds (checked at the end)
hd=$run/hosts
fleet=$run/fleet
mkdir -p "$fleet"
log "run directory $run"
H() { "$here/hosts.sh" "$1" --dir="$hd" "${@:2}"; }
on() { H exec "$1" -- "${@:2}"; }

passed=0
netns_made=() pids_made=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -f $hd/state ]]; then
    mapfile -t netns_made < <(awk '$2 == "netns" {print $3}' "$hd/state")
    mapfile -t pids_made < <(awk '$2 == "proc" {print $3 ":" $4}' "$hd/state")
    H down || true
  fi
  if ((passed && !keep)); then rm -rf "$run"; else echo "== kept $run"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- hosts, Slurm, shards ---------------------------------------------------------------------
H up --delay_bin="$build/benchmarks/wan/diloco-wan-delay" --loss="${CHECK_LOSS:-0.001}"
"$here/slurm.sh" up --dir="$hd"
island_nodes=${CHECK_CPP_NODES:-2}
if [[ $("$build/worker/diloco-worker" --helpfull 2>&1) != *--island_rank* ]]; then
  island_nodes=1
  log "diloco-worker has no island flags yet: the C++ learner runs one rank"
fi
submit() {  # partition, nodes, output, recipe, then VAR=value... for the job
  local p=$1 n=$2 out=$3 recipe=$4
  shift 4
  on coord env "$@" DILOCO_BUILD="$build" DILOCO_RUN="$fleet" \
    sbatch --parsable -p "$p" -N "$n" --chdir="$root" --output="$out" "$recipe" | cut -d';' -f1
}
shards_job=$(submit coord 1 "$run/shards.out" deploy/slurm/shards.sbatch \
  DILOCO_SERVER_FLAGS=deploy/flags/local-server.flags DILOCO_LEARNER_IDS=0,1 \
  DILOCO_SERVER_ARGS="--progress_interval=2s")
log "shards job $shards_job"
for ((i = 0; i < 120; i++)); do [[ -s $fleet/shards.env ]] && break; sleep 1; done
[[ -s $fleet/shards.env ]] || { cat "$run/shards.out"; echo "FAIL: shards did not start"; exit 1; }
# shellcheck disable=SC1091
. "$fleet/shards.env"
log "shards: $DILOCO_SERVERS"

# --- learners ---------------------------------------------------------------------------------
t_start=$(date +%s)
a_job=$(submit a "$island_nodes" "$run/learner0.out" deploy/slurm/learner.sbatch \
  DILOCO_WORKER_ID=0 DILOCO_LEARNER=cpp DILOCO_DURATION="$duration" DILOCO_RESTARTS=2 \
  DILOCO_ISLAND_TIMEOUT=10s DILOCO_WORKER_FLAGS=deploy/flags/local-worker.flags \
  DILOCO_WORKER_ARGS="--num_workers=1 --seed=1000 --progress_interval=1s --join_timeout=60s")
log "C++ island job $a_job on cluster a ($island_nodes nodes)"
# theta(0) is the C++ island's (its --init_seed): the PyTorch island joins after it. Rank 0
# logs the joined model's held-out loss, theta(0)'s, once joined.
for ((i = 0; i < 90; i++)); do
  grep -qs 'held-out loss' "$fleet/learner0/attempt0.rank0.log" && break
  [[ -n $(on coord squeue -h -j "$a_job" -o %i 2>/dev/null) ]] || break
  sleep 1
done
b_job=$(submit b 2 "$run/learner1.out" deploy/slurm/learner.sbatch \
  DILOCO_WORKER_ID=1 DILOCO_LEARNER=pytorch DILOCO_DURATION="$duration" DILOCO_RESTARTS=1 \
  DILOCO_PYTHON_ARGS="--inner_steps=50 --progress_s=1")
log "PyTorch island job $b_job on cluster b (2 nodes)"

# The last "applied" of a learner's progress lines in file $1 ("" when none).
applied_in() { sed -n 's/.*"event":"progress".*"applied":\([0-9]*\).*/\1/p' "$1" 2>/dev/null | tail -n 1; }

probe_py=$here/zmq_probe.py
listeners=$run/listeners.txt
# Every non-loopback TCP listener of every host, and the mechanism its ZMTP greeting names.
scan_listeners() {
  : >"$listeners"
  while read -r h; do
    on "$h" ss -ltnpH 2>/dev/null | while read -r _ _ _ local _ proc; do
      addr=${local%:*} port=${local##*:}
      addr=${addr#[} addr=${addr%]}
      [[ $addr == 127.* || $addr == ::1 ]] && continue
      [[ $addr == '*' || $addr == 0.0.0.0 || $addr == '::' ]] && addr=$(H addr "$h")
      name=$proc
      [[ $proc =~ \(\(\"([^\"]*)\" ]] && name=${BASH_REMATCH[1]}
      case $name in
        slurmctld | slurmd | slurmstepd | srun) kind=slurm-munge ;;  # Slurm's own, not probed
        *)
          kind=$(on "$h" /usr/bin/python3 "$probe_py" greet "$addr" "$port" 2>/dev/null || true)
          kind=${kind:-closed}
          ;;
      esac
      echo "$h $addr:$port $kind $name" >>"$listeners"
    done
  done < <(H list | awk '{print $1}')
}
# While both islands train (the PyTorch one has pushed): the shards', islands' and Slurm's ports.
while (($(date +%s) - t_start < kill_at)); do
  [[ -n $(applied_in "$fleet/learner1/attempt0.jsonl") ]] && break
  sleep 1
done
scan_listeners
while (($(date +%s) - t_start < kill_at)); do sleep 1; done
victim=$((island_nodes - 1))
# The attempt running now (an earlier one may have failed on its own).
killed_attempt=$(find "$fleet/learner0" -name 'attempt*.rank0.pid' 2>/dev/null |
  sed 's/.*attempt\([0-9]*\)\..*/\1/' | sort -n | tail -n 1 || true)
pidfile=$fleet/learner0/attempt${killed_attempt:-0}.rank$victim.pid
[[ -s $pidfile ]] || { tail -n 5 "$run/learner0.out"; echo "FAIL: no $pidfile: the C++ island never started"; exit 1; }
read -r vpid vhost <"$pidfile"
listed=$(on "$vhost" scontrol listpids "$a_job" 2>/dev/null | awk 'NR > 1 {print $1}' || true)
if ! grep -qx "$vpid" <<<"$listed"; then
  tail -n 5 "$run/learner0.out" "$fleet/learner0/attempt$killed_attempt.rank$victim.log" || true
  echo "FAIL: at the kill, rank $victim's PID $vpid (attempt $killed_attempt) is not among the" \
    "running job $a_job's processes on $vhost ('$listed'): the C++ island is not running"
  exit 1
fi
applied_a_before=$(applied_in "$fleet/learner0/attempt$killed_attempt.jsonl")
applied_b_before=$(applied_in "$fleet/learner1/attempt0.jsonl")
kill -KILL "$vpid"
t_kill=$(date +%s.%N)
log "SIGKILL to rank $victim of the C++ island's attempt $killed_attempt (PID $vpid on $vhost); applied so far:" \
  "a ${applied_a_before:-none}, b ${applied_b_before:-none}"

# Kill to the first push applied after it, seen in each learner's progress lines.
t_a="" t_b=""
deadline=$(($(date +%s) + duration + 120))
while [[ -z $t_a || -z $t_b ]] && (($(date +%s) < deadline)); do
  if [[ -z $t_a ]]; then
    for f in "$fleet"/learner0/attempt*.jsonl; do
      k=${f##*/attempt}
      ((${k%%.*} > killed_attempt)) || continue
      v=$(applied_in "$f")
      [[ -n $v && $v -gt 0 ]] && t_a=$(date +%s.%N) && break
    done
  fi
  if [[ -z $t_b ]]; then
    v=$(applied_in "$fleet/learner1/attempt0.jsonl")
    [[ -n $v && $v -gt ${applied_b_before:-0} ]] && t_b=$(date +%s.%N)
  fi
  on coord squeue -h -j "$a_job,$b_job" -o %i 2>/dev/null | grep -q . || break
  sleep 0.5
done
log "waiting for the learners to finish"
for ((i = 0; i < duration + 180; i++)); do
  [[ -z $(on coord squeue -h -j "$a_job,$b_job" -o %i 2>/dev/null) ]] && break
  sleep 1
done

# --- security probes (the shards still run) ---------------------------------------------------
"$build/ctl/diloco-ctl" keys --out="$run/stranger" --worker_ids=0 >/dev/null 2>&1 ||
  "$build/schema/diloco-keygen" --out="$run/stranger/worker-0" >/dev/null
probe() {  # name, extra worker flags: a learner that must be refused by every shard
  local name=$1 rc=0
  shift
  on a1 timeout 60 "$build/worker/diloco-worker" --flagfile="$root/deploy/flags/local-worker.flags" \
    --servers="$DILOCO_SERVERS" --worker_id=0 --steps=5 --join_timeout=10s "$@" \
    >"$run/probe-$name.log" 2>&1 || rc=$?
  echo "$rc"
}
rc_plain=$(probe plaintext)
rc_stranger=$(probe stranger --curve_server_key="$DILOCO_KEYS/server.public" \
  --curve_secret_key_file="$run/stranger/worker-0.secret")

# Each shard on its own: a plaintext DEALER and a stranger's key must fail the handshake, a
# listed key (the control) must pass it.
shard_probes=$run/shard-probes.txt
: >"$shard_probes"
for e in ${DILOCO_SERVERS//,/ }; do
  for m in plain stranger known; do
    args=("$m" "$e")
    [[ $m == plain ]] || args+=("$DILOCO_KEYS/server.public")
    [[ $m != known ]] || args+=("$DILOCO_KEYS/worker-1.secret")
    r=0
    line=$(on b1 /usr/bin/python3 "$probe_py" "${args[@]}" 2>&1) || r=$?
    echo "$r $line" >>"$shard_probes"
  done
done

stats_links=$(H links)

# --- stop, export, evaluate -------------------------------------------------------------------
on coord scancel "$shards_job"
for ((i = 0; i < 60; i++)); do
  [[ -z $(on coord squeue -h -j "$shards_job" -o %i 2>/dev/null) ]] && break
  sleep 1
done
stores=()
for s in 0 1; do stores+=("$fleet/store$s"); done
"$build/ctl/diloco-ctl" export --model="$DILOCO_MODEL" --fragments="$DILOCO_FRAGMENTS" --shards=2 \
  --out="$run/global.safetensors" "${stores[@]}" >"$run/export.log" 2>&1 || true
"$build/ctl/diloco-ctl" eval --model="$DILOCO_MODEL" --params="$run/global.safetensors" \
  --data=synthetic --eval_batches=64 >"$run/eval.log" 2>&1 || true
loss=$(sed -n 's/.*held-out set: loss \([0-9.]*\).*entropy floor \([0-9.]*\).*/\1/p' "$run/eval.log")
floor=$(sed -n 's/.*held-out set: loss \([0-9.]*\).*entropy floor \([0-9.]*\).*/\2/p' "$run/eval.log")
loss0=$(sed -n 's/.*held-out loss \([0-9.]*\).*/\1/p' "$fleet/learner0/attempt0.rank0.log" | head -n 1)

# --- teardown, then what is left --------------------------------------------------------------
mapfile -t netns_made < <(awk '$2 == "netns" {print $3}' "$hd/state")
mapfile -t pids_made < <(awk '$2 == "proc" {print $3 ":" $4}' "$hd/state")
H down 2>"$run/down.log" || true
left=()
for ns in "${netns_made[@]}"; do ip netns list | awk '{print $1}' | grep -qxF "$ns" && left+=("netns $ns"); done
# shellcheck source=deploy/hosts/lib.sh
. "$here/lib.sh"
for p in "${pids_made[@]}"; do proc_alive "${p%%:*}" "${p#*:}" && left+=("process ${p%%:*}"); done
[[ -e $hd ]] && left+=("directory $hd")
# Where daemons and libraries write when not told otherwise (Slurm, munge, gloo, torch); /tmp
# is shared with others' work, so only its run directory's files are known to be ours.
while read -r f; do left+=("file $f"); done < <(find /var /run /dev/shm /etc /root -xdev \
  -newer "$run/.start" ! -type d ! -path '/var/cache/*' ! -path '/var/lib/apt/*' \
  ! -path '/root/.cache/*' 2>/dev/null || true)

# --- verdict ----------------------------------------------------------------------------------
fails=0
check() {  # description, then a command that must succeed
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
ge() { awk "BEGIN{exit !($1 >= $2)}"; }
done_field() {  # file, field: from the "done" line
  sed -n "s/.*\"event\":\"done\".*\"$2\":\([^,}]*\).*/\1/p" "$1" 2>/dev/null | tail -n 1
}
last_a=$(find "$fleet/learner0" -name 'attempt*.jsonl' 2>/dev/null | sort | tail -n 1 || true)
last_attempt=${last_a##*/attempt}
last_attempt=${last_attempt%%.*}
events() {  # learner, attempt, rank: its event log
  echo "$fleet/learner$1/attempt$2.jsonl$([[ $3 == 0 ]] || echo ".rank$3")"
}
sums_a=() sums_b=()
for ((r = 0; r < island_nodes; r++)); do
  sums_a+=("$(done_field "$(events 0 "$last_attempt" $r)" params_checksum)")
done
for r in 0 1; do sums_b+=("$(done_field "$(events 1 0 $r)" params_checksum)"); done
same() { [[ -n $1 ]] && for x in "$@"; do [[ $x == "$1" ]] || return 1; done; }
gap_closed=""
if [[ -n $loss && -n $floor && -n $loss0 ]]; then
  gap_closed=$(awk "BEGIN{printf \"%.3f\", ($loss0 - $loss) / ($loss0 - $floor)}")
fi
kill_to_a=$([[ -n $t_a ]] && awk "BEGIN{printf \"%.1f\", $t_a - $t_kill}" || echo never)
kill_to_b=$([[ -n $t_b ]] && awk "BEGIN{printf \"%.1f\", $t_b - $t_kill}" || echo never)
plain_zmq=$(grep -c ' zmq-NULL ' "$listeners" || true)

echo
echo "==== fleet check ($([[ $short == 1 ]] && echo short || echo full): ${duration}s of" \
  "training, kill at ${kill_at}s)"
echo "links (tbf counters; up = cluster to coordinator):"
mapfile -t link_lines <<<"$stats_links"
printf '  %s\n' "${link_lines[@]}"
grep -h 'delay-' "$run/down.log" | sed 's/^hosts.sh: /  delayer /' || true
echo "non-loopback listeners (host address kind process):"
sed 's/^/  /' "$listeners"
echo "C++ island ($island_nodes rank(s)): attempts $((last_attempt + 1)), final ranks' checksums" \
  "${sums_a[*]:-none};" \
  "kill to next applied push ${kill_to_a}s"
echo "PyTorch island: ranks' checksums ${sums_b[*]:-none}; first push applied after the kill" \
  "${kill_to_b}s after it"
echo "export: held-out loss ${loss:-?}, theta(0) ${loss0:-?}, floor ${floor:-?}: gap closed" \
  "${gap_closed:-?}"
echo "probes: plaintext learner exit ${rc_plain}, unknown-key learner exit ${rc_stranger};" \
  "per shard (status, verdict):"
sed 's/^/  /' "$shard_probes"
check "C++ island: pushes applied after the kill (a restarted attempt)" test -n "$t_a"
check "PyTorch island: pushes applied after the kill" test -n "$t_b"
check "C++ island's ranks ended identical" same "${sums_a[@]}"
check "PyTorch island's ranks ended identical" same "${sums_b[@]}"
check "export closed >= half the gap to the floor" ge "${gap_closed:-0}" 0.5
check "plaintext client refused" test "$rc_plain" -ne 0
check "unknown-key client refused" test "$rc_stranger" -ne 0
for e in ${DILOCO_SERVERS//,/ }; do
  for m in plain stranger known; do
    check "shard ${e#tcp://}: $m handshake as it must be" grep -q "^0 $m $e:" "$shard_probes"
  done
done
check "no plaintext ZeroMQ port on a non-loopback address" test "$plain_zmq" -eq 0
check "a shard port answered the ZMTP probe with CURVE" grep -q ' zmq-CURVE ' "$listeners"
check "nothing left behind (${left[*]:-none})" test ${#left[@]} -eq 0
if ((fails)); then
  echo "FAIL: $fails check(s) failed; logs in $run"
  exit 1
fi
passed=1
echo "PASS"
