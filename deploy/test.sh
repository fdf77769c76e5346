#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA paths too when nvcc is present), and runs
# the whole test suite, the convergence study's quick mode, the fleet benchmark's and the fleet
# check across namespace hosts (deploy/hosts/check-fleet.sh --short); then
# fuzzes the message decoder for 60 s (clang, libFuzzer + ASan + UBSan), runs the unit tests and
# the sync client's, shard's and security multi-process tests built with AddressSanitizer +
# UndefinedBehaviorSanitizer, and the threaded code's tests under ThreadSanitizer.
# GPU tests skip where there is no GPU. CI runs exactly this.
#
# Usage: deploy/test.sh [--no-sanitize] [--fuzz-seconds=N]
set -euo pipefail
# One stream, in order: a log that keeps only the standard output (and only its tail) still
# shows why a stage failed, and where.
exec 2>&1
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=1 fuzz_seconds=60
for a in "$@"; do
  case $a in
    --no-sanitize) sanitize=0 ;;
    --fuzz-seconds=*) fuzz_seconds=${a#*=} ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
jobs=$(nproc)

# Every ctest call passes --no-tests=error: a filter that matches no test fails the run. And each
# alternative of an -R or -E regex must name a test of its set (ctest -N, the same labels): a
# renamed test would otherwise drop out of the run, or out of its exclusion, unseen.
check_filter() {  # build include-regex exclude-regex [label arguments...]
  local build=$1 include=$2 exclude=$3 names alt alts
  shift 3
  names=$(ctest --test-dir "$build" -N "$@" -R "$include" | sed -n 's/^ *Test *#[0-9]*: //p')
  IFS='|' read -r -a alts <<<"$include|$exclude"
  for alt in "${alts[@]}"; do
    grep -qE -- "$alt" <<<"$names" ||
      { echo "deploy/test.sh: no test in $build matches '$alt' ($*)" >&2; exit 1; }
  done
}

# The build targets (executables) the tests a ctest selection picks in BUILD start: gtest
# executables and programs named by path inside BUILD (scripts and interpreters are not targets).
ctest_executables() {  # build [ctest selection arguments...]
  local build=$1
  shift
  ctest --test-dir "$build" --show-only=json-v1 "$@" | python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin)["tests"]:
    cmd = t.get("command") or []
    if cmd and os.path.realpath(cmd[0]).startswith(build + "/"):
        print(os.path.basename(cmd[0]))' "$build"
}

# Each stage's wall time, printed as it ends and together at the end (also when a stage fails),
# so that a CI log shows where the minutes go.
stage_start=$SECONDS stage_log=()
stage() {  # name: the stage that has just ended
  stage_log+=("$(printf '%5d s  %s' $((SECONDS - stage_start)) "$1")")
  echo "deploy/test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
trap 'printf "deploy/test.sh: stages (%d s in all)\n" $SECONDS; printf "  %s\n" "${stage_log[@]}"' EXIT

"$root/deploy/install-deps.sh" --with-python-tests
stage "install-deps"

build=${BUILD_DIR:-$root/build/test}
# The Python tests run the interpreter install-deps gave python3-torch to, whatever python3 is
# first on PATH (python/CMakeLists.txt takes the active Python otherwise).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDILOCO_WERROR=ON \
  -DPython_EXECUTABLE=/usr/bin/python3
ninja -C "$build" -j"$jobs"
stage "release build"
ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 600 --no-tests=error
stage "release ctest"

# diloco_ps as users install it (tests/python/venv_install_test.sh): pip install ./python into a
# fresh venv over Debian's packages, offline, then a learner from that venv against a shard. Its
# CMake folder is kept in the build: about 2 minutes the first time, 10-20 s after.
"$root/tests/python/venv_install_test.sh" "$build"
stage "pip install into a venv"

# The GPU run's rehearsal where nvcc is (about 15 s): the bundle for the GPU machine is packed
# from this build and every part of the GPU run ends with its "no GPU" verdict here, with the
# CUDA toolkit hidden (benchmarks/gpu/rehearse.sh).
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  "$root/benchmarks/gpu/rehearse.sh" "$build"
  stage "GPU rehearsal"
fi

# Training quality: the convergence study's quick mode (about 6 minutes on 2 cores) fails the
# run when one of its gates is missed (benchmarks/quality/summarize.py, QUICK_GATES: the
# exported models against synchronous DiLoCo and a lone worker).
"$root/benchmarks/quality/run.sh" --mode=quick --build="$build" --out="$build/quality"
stage "convergence study, quick"

# The fleet benchmark's quick mode (< 5 min on 2 cores): shards and synthetic learners on
# 127.0.0.1, a few throughput rows, utilization against no sync, a learner and a shard killed
# mid-run. It fails when its own output is malformed (a row missing, a number not finite, a plot
# not written), never on speed.
"$root/benchmarks/fleet/diloco-bench" --mode=quick --build="$build" --out="$build/fleet"
stage "fleet benchmark, quick"

# The fleet across hosts, short form (about 2 minutes, deploy/hosts/README.md): a coordinator
# and two clusters of two nodes as network namespaces with WAN links, Slurm daemons on each,
# the shards and two islands (C++, PyTorch) submitted through deploy/slurm's recipes, a rank
# killed mid-run; fails on any of its checks. Exit 77: this machine cannot make the hosts (not
# root, no network namespaces or TUN), said loudly and not counted as a pass.
fleet_rc=0
DILOCO_BUILD="$build" "$root/deploy/hosts/check-fleet.sh" --short || fleet_rc=$?
if ((fleet_rc == 77)); then
  echo "deploy/test.sh: SKIPPED the fleet across hosts: this machine cannot make namespace hosts"
elif ((fleet_rc != 0)); then
  exit "$fleet_rc"
fi
stage "fleet across hosts, short"

if ((sanitize)); then
  FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$root/build/fuzz} "$root/tests/fuzz/run_fuzz.sh" "$fuzz_seconds"
  stage "fuzz build and run"

  # Unit tests only (no multi-process, no slow training runs): ASan + UBSan, no CUDA. Built with
  # clang, as the fuzz and TSan builds are: it compiles this instrumented tree in about half of
  # g++'s time (the release build above stays g++, what ships).
  asan=${ASAN_BUILD_DIR:-$root/build/asan}
  cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDILOCO_SANITIZE=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DDILOCO_CUDA=OFF -DDILOCO_BUILD_BENCHMARKS=OFF
  # The multi-process tests of the sync client, the shard and the security paths run here too
  # (the processes they start are the sanitized builds); cadence and long training tests stay
  # out (timing-bound). The 124M shard tests (label "size") stay out as well: the release run
  # checks their memory bound and at-size recovery, and the same shard code runs here in
  # server_shard_test's cases; instrumented, they took three minutes, alone on the 2 cores.
  asan_units=(-LE "integration|slow|gpu|size")
  asan_include="SyncClientTest|DamagedPush|WorkerSyncTest|CurveServerTest|protocol_client"
  asan_include+="|FaultProxy"
  asan_exclude="Dynamic|WithoutDylu|Int8AndInt4|TrainsAtFullSpeed"
  asan_multi=(-L integration -R "$asan_include" -E "$asan_exclude")
  # Only what those tests run is built: the executables the same selections start in the
  # release build (where every test is discovered), and what the multi-process and script
  # tests start or read (the programs; the second protocol client's generated Python). An
  # executable left out leaves a placeholder test "<target>_NOT_BUILT" here, which the runs
  # below skip; one that a selection needs cannot be left out.
  mapfile -t asan_targets < <(
    { ctest_executables "$build" "${asan_units[@]}"; ctest_executables "$build" "${asan_multi[@]}"
      printf '%s\n' diloco-server diloco-worker diloco-ctl diloco-keygen protocol_client_py; } |
      sort -u | grep -xFf <(ninja -C "$asan" -t targets all | sed -n 's/: .*//p'))
  echo "deploy/test.sh: the ASan build: ${#asan_targets[@]} targets"
  ninja -C "$asan" -j"$jobs" "${asan_targets[@]}"
  stage "ASan build"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" -j"$jobs" --output-on-failure --timeout 600 --no-tests=error \
    "${asan_units[@]}" -E "_NOT_BUILT$"
  stage "ASan unit tests"
  check_filter "$asan" "$asan_include" "$asan_exclude" -L integration
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" -j"$jobs" --output-on-failure --timeout 600 --no-tests=error \
    "${asan_multi[@]}"
  stage "ASan multi-process tests"

  # ThreadSanitizer over the threaded code (tests/sanitizers/run_tsan.sh).
  "$root/tests/sanitizers/run_tsan.sh" "${TSAN_BUILD_DIR:-$root/build/tsan}"
  stage "TSan build and tests"
fi
