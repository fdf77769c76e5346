#!/usr/bin/env bash
# ThreadSanitizer over the threaded code (and clang's -Wthread-safety over its locks): the sync
# client (training thread + I/O thread), the shard with its apply pool and checkpoint writer,
# the kernels' thread pool, the server's ZAP handler thread; the diloco-server and
# diloco-worker processes these tests start are TSan builds too. Any report fails the run (each
# process writes its reports under BUILD/tsan-reports). Run it before changing those files;
# deploy/test.sh runs it in CI.
#
# Usage: tests/sanitizers/run_tsan.sh [BUILD_DIR]   (default build/tsan)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/tsan}
jobs=$(nproc)

# clang: its TSan, and its -Wthread-safety check of the lock annotations (an error there).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DDILOCO_SANITIZE_THREAD=ON -DDILOCO_CUDA=OFF -DDILOCO_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C "$build" -j"$jobs" diloco-server diloco-worker diloco-ctl kernels_thread_pool_test \
  server_shard_test server_writer_test worker_sync_client_test worker_sync_test \
  security_curve_test chaos_fault_proxy_test

reports=$build/tsan-reports
rm -rf "$reports"
mkdir -p "$reports"
# Timing-bound cadence and long training tests are left out: TSan slows every thread 5-15x,
# which changes what they measure, not what they synchronise.
include="ThreadPool|Shard|Writer|SyncClientTest|DamagedPush|WorkerSyncTest|CurveServerTest"
include+="|FaultProxy"
exclude="Dynamic|WithoutDylu|Int8AndInt4|TrainsAtFullSpeed"
# Each alternative of both regexes must name a test the targets above define (a renamed test
# would otherwise drop out of the run, or out of its exclusion, unseen); --no-tests=error fails
# a run that matches none at all.
names=$(ctest --test-dir "$build" -N -R "$include" | sed -n 's/^ *Test *#[0-9]*: //p')
IFS='|' read -r -a alts <<<"$include|$exclude"
for alt in "${alts[@]}"; do
  grep -qE -- "$alt" <<<"$names" ||
    { echo "run_tsan: no test in $build matches '$alt'" >&2; exit 1; }
done
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$reports/tsan \
suppressions=$root/tests/sanitizers/tsan.supp" \
  ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 600 --no-tests=error \
  -R "$include" -E "$exclude"
if compgen -G "$reports/tsan.*" >/dev/null; then
  cat "$reports"/tsan.*
  echo "run_tsan: ThreadSanitizer reports above (one file per process in $reports)" >&2
  exit 1
fi
echo "run_tsan: no ThreadSanitizer reports"
