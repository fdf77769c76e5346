# shellcheck shell=bash disable=SC2034  # (PROC_ENDED, PROC_STATUS: outputs for the caller)
# Waiting for a run's background processes with a deadline, and a report on those still running
# past it. Sourced by benchmarks/quality/run.sh; tested by procs_test.sh.
#
# Why not `wait -n PID...`: bash 5.2 (Debian 12's) misses a child that died of a signal once the
# end of another child has been reported: reporting marks the dead one "notified", and `wait -n`
# then skips it ("no such job") and waits on for the others in its list. The study listed its
# shards there, which exit only when told, so a crashed worker left it waiting forever instead of
# failing (bash 5.3 looks up such a child's saved status first). A plain `wait PID` reads that
# saved status in every bash, and bash reaps its children as they end, so `kill -0` fails as soon
# as one has ended: polling the two has no such hole.

# The first of `pids` that has ended: its pid in PROC_ENDED, its status in PROC_STATUS. Polls
# every 0.2 s; returns 1 (nothing set) once $SECONDS reaches `deadline` with all still running.
proc_await_any() {  # deadline pid...
  local deadline=$1 p
  shift
  while :; do
    for p in "$@"; do
      if ! kill -0 "$p" 2>/dev/null; then
        PROC_ENDED=$p PROC_STATUS=0
        wait "$p" 2>/dev/null || PROC_STATUS=$?
        return 0
      fi
    done
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# `pid` and every process below it (a supervising subshell's worker, say), parents first.
proc_tree() {  # pid
  local c
  echo "$1"
  for c in $(pgrep -P "$1" 2>/dev/null); do proc_tree "$c"; done
}

# gdb's `thread apply all bt` in `file`, one line per thread that runs this project's code: its
# name, the innermost frame and the first frames of ours; then a count of the other threads
# (ZeroMQ's and RocksDB's own, say).
proc_summarize_stacks() {  # file
  awk 'function flush() { if (line == "") return; if (ours) print line; else others++ }
       /^Thread / { flush(); match($0, /"[^"]*"/)
                    line = "    " substr($0, RSTART, RLENGTH) ":"; n = 0; ours = 0; next }
       /^#[0-9]+ / { f = $0; sub(/^#[0-9]+ +(0x[0-9a-f]+ in )?/, "", f); sub(/ ?\(.*$/, "", f)
                     mine = f ~ /diloco|^main$/; ours = ours || mine
                     if (n == 0 || (mine && n < 4)) { line = line " " f; n++ } }
       END { flush(); if (others) print "    and " others " thread(s) in library code only" }' "$1"
}

# What one process is doing: its threads' stacks, summarized (gdb, where installed: PROC_GDB; the
# whole stacks go to `full`, a file), or else each thread's state and kernel wait channel.
PROC_GDB=${PROC_GDB:-gdb}
proc_threads() {  # pid full
  local pid=$1 full=$2 t
  if command -v "$PROC_GDB" >/dev/null &&
    timeout 60 "$PROC_GDB" -batch -nx -p "$pid" -ex 'thread apply all bt' >"$full" 2>&1 &&
    grep -q '^#0 ' "$full"; then
    proc_summarize_stacks "$full"
    return
  fi
  for t in /proc/"$pid"/task/*; do
    [[ -r $t/stat ]] || continue
    echo "    \"$(cat "$t/comm" 2>/dev/null)\": state $(awk '{ print $3 }' "$t/stat" 2>/dev/null)," \
      "waiting in $(cat "$t/wchan" 2>/dev/null || echo "?") (no gdb: no stack)"
  done
}

# A report on processes still running past their deadline, then each one and every process below
# it SIGKILLed. Per entry "name|pid|log": its threads (proc_threads) and its log's last lines.
# The full stacks are kept in `dir`. Prints to stdout.
proc_report_hung() {  # dir entry...
  local dir=$1 entry name pid log p comm
  shift
  for entry in "$@"; do
    IFS='|' read -r name pid log <<<"$entry"
    kill -0 "$pid" 2>/dev/null || continue
    echo "  $name (pid $pid) still running; the last lines of $log:"
    tail -n 3 "$log" 2>/dev/null | sed 's/^/    | /'
    for p in $(proc_tree "$pid"); do
      comm=$(cat /proc/"$p"/comm 2>/dev/null) || continue
      [[ $comm == bash || $comm == sleep ]] && continue
      echo "  $name: $comm (pid $p), its threads (stacks in $dir/stacks.$p):"
      proc_threads "$p" "$dir/stacks.$p"
    done
  done
  for entry in "$@"; do
    IFS='|' read -r name pid log <<<"$entry"
    for p in $(proc_tree "$pid"); do kill -KILL "$p" 2>/dev/null || true; done
  done
}
