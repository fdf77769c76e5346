#!/usr/bin/env bash
# benchmarks/quality/procs.sh: the study's waiting and its report on hung processes.
#   1. Two workers that have both ended, one of a signal, before the wait: both are found, with
#      their statuses, while the "shard" beside them runs on (bash 5.2's `wait -n` reported the
#      first and then waited for the shard instead of the second, forever).
#   2. Nothing ends before the deadline: the wait returns 1 at the deadline, not when a process
#      ends.
#   3. The report names a process still running, shows its log's last lines and its threads (the
#      process below a supervising subshell included), then kills the subshell and the process.
# Every process it starts is killed by PID on exit; none runs longer than 30 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=benchmarks/quality/procs.sh
source "$here/procs.sh"
work=$(mktemp -d)
started=()
trap 'for p in "${started[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
fail() { echo "procs_test: $*" >&2; exit 1; }

# 1. Both workers dead before the first wait; the second of a signal.
sleep 30 &
shard=$!
started+=("$shard")
(exit 0) &
ok=$!
bash -c 'kill -ABRT $$' 2>/dev/null &
crashed=$!
started+=("$ok" "$crashed")
until ! kill -0 "$ok" 2>/dev/null && ! kill -0 "$crashed" 2>/dev/null; do sleep 0.05; done
sleep 0.1  # a foreground command: bash reports the signal's victim here ("Aborted")
declare -A seen=()
proc_await_any $((SECONDS + 10)) "$shard" "$ok" "$crashed" || fail "no worker found in 10 s"
[[ $PROC_ENDED != "$shard" ]] || fail "the shard was reported as ended"
seen[$PROC_ENDED]=$PROC_STATUS
second=$ok
[[ $PROC_ENDED == "$ok" ]] && second=$crashed
# The next wait lists the worker not yet found (as run.sh does) and the shard.
proc_await_any $((SECONDS + 10)) "$shard" "$second" || fail "the second worker was missed"
[[ $PROC_ENDED == "$second" ]] || fail "pid $PROC_ENDED reported, not the second worker $second"
seen[$second]=$PROC_STATUS
[[ ${seen[$ok]:-} == 0 ]] || fail "the worker that exited 0 has status '${seen[$ok]:-}'"
[[ ${seen[$crashed]:-} == 134 ]] || fail "the SIGABRT worker has status '${seen[$crashed]:-}', not 134"
kill -0 "$shard" || fail "the shard ended"

# 2. The deadline.
start=$SECONDS
if proc_await_any $((SECONDS + 2)) "$shard"; then fail "a running process was reported as ended"; fi
((SECONDS - start >= 1 && SECONDS - start <= 10)) ||
  fail "the wait returned after $((SECONDS - start)) s, not at its 2 s deadline"

# 3. The report: a supervising subshell whose child hangs; with gdb's stacks where gdb is
# installed, and without gdb (the kernel's wait channels).
report_case() {  # gdb-command
  local PROC_GDB=$1 sub child report p
  echo "step 1 of 3 done" >"$work/hung.log"
  bash -c '/usr/bin/python3 -c "import time; time.sleep(30)"; true' &
  sub=$!
  started+=("$sub")
  for _ in $(seq 100); do
    child=$(pgrep -P "$sub" || true)
    [[ -n $child ]] && break
    sleep 0.05
  done
  [[ -n $child ]] || fail "the hung child did not start"
  started+=("$child")
  report=$(proc_report_hung "$work" "worker 7|$sub|$work/hung.log")
  grep -q "worker 7 (pid $sub) still running" <<<"$report" || fail "not named: $report"
  grep -q '| step 1 of 3 done' <<<"$report" || fail "no log lines: $report"
  grep -qE "worker 7: python3 \(pid $child\)" <<<"$report" || fail "child not reported: $report"
  grep -qE '^    ("python3":|and 1 thread)' <<<"$report" || fail "no thread line ($1): $report"
  for p in "$sub" "$child"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$p" 2>/dev/null || fail "pid $p still running after the report"
  done
}
command -v gdb >/dev/null && report_case gdb
report_case /nonexistent/gdb
# 4. The stacks' summary: the threads in this project's code, each with its innermost frame and
# our first frames; the others counted.
cat >"$work/stacks" <<'EOF'
Thread 3 (Thread 0x7f01 (LWP 12) "ZMQbg/IO/0"):
#0  0x00007f01 in epoll_wait (epfd=5, events=0x1, maxevents=256, timeout=-1) at epoll_wait.c:30
#1  0x00007f02 in ?? () from /lib/x86_64-linux-gnu/libzmq.so.5
Thread 2 (Thread 0x7f03 (LWP 11) "diloco-worker"):
#0  __futex_abstimed_wait_common64 (private=0, cancel=true, abstime=0x0) at futex-internal.c:57
#1  0x00005501 in std::condition_variable::wait(std::unique_lock<std::mutex>&) () from libstdc++
#2  0x00005502 in diloco::worker::SyncShared::TakeArrivals(absl::Duration) ()
#3  0x00005503 in diloco::worker::SyncClient::Impl::AwaitAnswers(x, y) ()
#4  0x00005504 in diloco::worker::SyncClient::AfterStep(a, b, c) ()
#5  0x00005505 in diloco::worker::Run(w) ()
#6  0x00005506 in main ()
Thread 1 (Thread 0x7f04 (LWP 10) "rocksdb:low"):
#0  __futex_abstimed_wait_common64 (private=0, cancel=true, abstime=0x0) at futex-internal.c:57
EOF
want='    "diloco-worker": __futex_abstimed_wait_common64 diloco::worker::SyncShared::TakeArrivals'
want+=' diloco::worker::SyncClient::Impl::AwaitAnswers diloco::worker::SyncClient::AfterStep'
got=$(proc_summarize_stacks "$work/stacks")
[[ $got == "$want"$'\n''    and 2 thread(s) in library code only' ]] || fail "stacks summarized as: $got"
echo "procs_test: ok"
