# shellcheck shell=bash
# The state file of a fleet of namespace hosts (deploy/hosts/README.md), shared by hosts.sh and
# slurm.sh. Every thing a script makes is appended to $HOSTS_DIR/state the moment it exists, one
# line each, "GROUP KIND ARGS...":
#   GROUP netns NAME                  a network namespace (its veths and bridges die with it)
#   GROUP proc PID STARTTIME LABEL    a process, identified by its PID and its start time
#   GROUP host NAME NETNS ADDR PID    a host: its namespace, address and UTS holder's PID
#   GROUP slurm CONF                  a running slurmctld's configuration (its jobs are cancelled)
#   GROUP dir PATH                    a directory made for the run
# Teardown walks a group's lines last to first and removes exactly those things: a process only
# when its PID still has the recorded start time, a namespace after stopping what still runs in
# it. Nothing is ever found by a name pattern.

die() { echo "${0##*/}: $*" >&2; exit 1; }

record() { echo "$*" >>"$HOSTS_DIR/state"; }

# The start time of a process (field 22 of /proc/PID/stat), empty when it does not exist or
# has exited (a zombie waiting for its parent).
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  awk '$1 != "Z" {print $20}' <<<"$stat"
}

# Records the background process $1 (just started) with label $2.
record_proc() { record "$1 proc $2 $(start_time "$2") $3"; }

# True while PID $1 runs with start time $2.
proc_alive() { [[ -n $2 && $(start_time "$1") == "$2" ]]; }

# TERM, then KILL after $3 seconds, the process $1 if it still has start time $2.
stop_proc() {
  local pid=$1 st=$2 wait=${3:-5} i
  proc_alive "$pid" "$st" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait * 10; i++)); do proc_alive "$pid" "$st" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do proc_alive "$pid" "$st" || return 0; sleep 0.1; done
  echo "${0##*/}: process $pid did not exit" >&2
}

# Stops every process in namespace $1 (TERM, then KILL), then deletes the namespace.
remove_netns() {
  local ns=$1 pids i
  ip netns list | awk '{print $1}' | grep -qxF "$ns" || return 0
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  if [[ -n $pids ]]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.1
    done
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.1
    done
  fi
  ip netns del "$ns" 2>/dev/null || echo "${0##*/}: could not delete namespace $ns" >&2
}

# Cancels every job of the Slurm cluster of configuration $1 and waits (bounded) for them.
cancel_jobs() {
  local conf=$1 holder ids i
  holder=$(host_field coord 5)
  [[ -f $conf && -n $holder ]] || return 0
  ids=$(SLURM_CONF=$conf timeout 10 nsenter -t "$holder" --net --uts squeue -h -o %i 2>/dev/null) ||
    return 0
  [[ -n $ids ]] || return 0
  echo "${0##*/}: cancelling jobs ${ids//$'\n'/ }" >&2
  # shellcheck disable=SC2086
  SLURM_CONF=$conf timeout 10 nsenter -t "$holder" --net --uts scancel $ids 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do
    [[ -z $(SLURM_CONF=$conf timeout 10 nsenter -t "$holder" --net --uts squeue -h -o %i \
      2>/dev/null) ]] && return 0
    sleep 1
  done
}

# Removes what group $1 recorded ("all": every group), last to first, and drops its lines.
teardown() {
  local group=$1 state=$HOSTS_DIR/state lines g kind a b i
  [[ -f $state ]] || return 0
  mapfile -t lines <"$state"
  for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
    read -r g kind a b _ <<<"${lines[$i]}"
    [[ $group == all || $g == "$group" ]] || continue
    case $kind in
      proc)
        stop_proc "$a" "$b"
        local label=${lines[$i]##* }
        if [[ -s $HOSTS_DIR/log/$label.stats.json ]]; then
          echo "${0##*/}: $label: $(cat "$HOSTS_DIR/log/$label.stats.json")" >&2
        fi
        ;;
      netns) remove_netns "$a" ;;
      slurm) cancel_jobs "$a" ;;
      dir) [[ $a == "$HOSTS_DIR"/* ]] && rm -rf -- "$a" ;;
    esac
  done
  if [[ $group == all ]]; then
    rm -f "$state"
    rmdir "$HOSTS_DIR" 2>/dev/null || true
  else
    grep -v "^$group " "$state" >"$state.new" || true
    mv "$state.new" "$state"
  fi
}

# Field $2 of host $1's line (2 name, 3 namespace, 4 address, 5 holder PID).
host_field() {
  awk -v h="$1" -v f="$2" '$2 == "host" && $3 == h {print $(f + 1)}' "$HOSTS_DIR/state" \
    2>/dev/null | tail -n 1
}

hosts_list() { awk '$2 == "host" {print $3}' "$HOSTS_DIR/state" 2>/dev/null; }

# Runs a command on host $1 (its network and UTS namespaces), with the fleet's Slurm configured.
on_host() {
  local h=$1 pid
  shift
  pid=$(host_field "$h" 5)
  [[ -n $pid ]] || die "no host '$h' in $HOSTS_DIR/state (hosts: $(hosts_list | xargs))"
  kill -0 "$pid" 2>/dev/null || die "host $h's holder process $pid is gone"
  if [[ -f $HOSTS_DIR/slurm/slurm.conf ]]; then export SLURM_CONF=$HOSTS_DIR/slurm/slurm.conf; fi
  nsenter -t "$pid" --net --uts -- "$@"
}
