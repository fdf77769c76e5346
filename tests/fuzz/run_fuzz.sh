#!/usr/bin/env bash
# Fuzzes ParseMessage, the payload checks and decoders, and the TrainAssembler
# (tests/fuzz/message_fuzz.cc) for SECONDS (default 60, the CI budget; run longer locally, e.g.
# 3600).
# Configures its own clang build (build-fuzz/) with every library instrumented for coverage,
# ASan and UBSan, builds only the fuzz target and its dependencies, and starts from the
# checked-in seed corpus. New inputs go to build-fuzz/corpus, crashes to build-fuzz/artifacts.
set -euo pipefail
SECONDS_BUDGET="${1:-60}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDILOCO_CUDA=OFF \
  -DDILOCO_BUILD_BENCHMARKS=OFF -DDILOCO_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$BUILD" message_fuzz
mkdir -p "$BUILD/corpus" "$BUILD/artifacts"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$BUILD/tests/fuzz/message_fuzz" -max_total_time="$SECONDS_BUDGET" -max_len=4096 \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$BUILD/artifacts/" "$BUILD/corpus" "$ROOT/tests/fuzz/corpus/message"
