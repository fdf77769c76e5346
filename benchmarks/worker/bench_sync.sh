#!/usr/bin/env bash
# Compute utilisation of a syncing worker: its tokens/s with sync on divided by tokens/s with
# sync off, measured in the same invocation, for each H and codec.
#
#   fleet:  2 shards + 4 syncing workers + 1 worker without sync, all at once on 127.0.0.1.
#           The no-sync worker is the ceiling, measured under the same CPU contention.
#   single: 1 syncing worker + 2 shards, and beside it the same worker without sync (2 cores:
#           one each; the shards are mostly idle): the honest per-worker cost of syncing.
#           Both run at once so that other load on the box hits both alike.
#
# Usage: benchmarks/worker/bench_sync.sh BUILD_DIR [seconds per run] [H list] [codec list]
#   e.g. benchmarks/worker/bench_sync.sh build-sync 15 "50 500" "fp32 int8 int4"
set -euo pipefail
BUILD=${1:?build dir}
SECS=${2:-15}
HS=${3:-"50 500"}
CODECS=${4:-"fp32 bf16 fp8 int8 int4"}
MODEL=${MODEL:-tiny}
SERVER=$BUILD/server/diloco-server
WORKER=$BUILD/worker/diloco-worker
DIR=$(mktemp -d /tmp/diloco-bench-sync.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

WORKER_FLAGS=(--model="$MODEL" --fragments=4 --batch=8 --threads=1 --eval_batches=1
              --progress_interval=1s --duration="${SECS}s")

# tokens/s of a JSONL between the first progress event after 3 s and the last one.
tps() {
  python3 - "$1" <<'EOF'
import json, sys
p = [e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "progress"]
p = [e for e in p if e["elapsed_s"] >= 3] or p
a, b = p[0], p[-1]
print("%.1f" % ((b["tokens"] - a["tokens"]) / max(b["elapsed_s"] - a["elapsed_s"], 1e-9)))
EOF
}

start_shards() {  # $1: run dir; sets ENDPOINTS
  local d=$1
  for i in 0 1; do
    "$SERVER" --bind='tcp://127.0.0.1:*' --port_file="$d/port$i" --shard=$i --shards=2 \
      --fragments=4 --model="$MODEL" --grace_cap=1s --progress_interval=1000s \
      >"$d/shard$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1; do while [ ! -s "$d/port$i" ]; do sleep 0.05; done; done
  ENDPOINTS="$(cat "$d/port0"),$(cat "$d/port1")"
}

stop_all() { cleanup; wait 2>/dev/null || true; PIDS=(); }

echo "model $MODEL, ${SECS}s per run, batch 8, threads 1, 4 fragments, $(nproc) cores"
printf "%-7s %5s %-6s %12s %12s %7s\n" mode H codec "sync tok/s" "nosync tok/s" ratio

for H in $HS; do
  for C in $CODECS; do
    d="$DIR/single-$H-$C"; mkdir -p "$d"
    start_shards "$d"
    "$WORKER" "${WORKER_FLAGS[@]}" --servers="$ENDPOINTS" --inner_steps="$H" --codec="$C" \
      --metrics_jsonl="$d/w.jsonl" >"$d/w.log" 2>&1 &
    PIDS+=($!)
    "$WORKER" "${WORKER_FLAGS[@]}" --metrics_jsonl="$d/base.jsonl" >"$d/base.log" 2>&1
    sleep 4  # the syncing worker drains and exits
    stop_all
    S=$(tps "$d/w.jsonl")
    B=$(tps "$d/base.jsonl")
    printf "%-7s %5s %-6s %12s %12s %7.3f\n" single "$H" "$C" "$S" "$B" \
      "$(python3 -c "print($S/$B)")"

    d="$DIR/fleet-$H-$C"; mkdir -p "$d"
    start_shards "$d"
    for w in 0 1 2 3; do
      "$WORKER" "${WORKER_FLAGS[@]}" --servers="$ENDPOINTS" --worker_id=$w --num_workers=4 \
        --inner_steps="$H" --codec="$C" --metrics_jsonl="$d/w$w.jsonl" >"$d/w$w.log" 2>&1 &
      PIDS+=($!)
    done
    "$WORKER" "${WORKER_FLAGS[@]}" --metrics_jsonl="$d/base.jsonl" >"$d/base.log" 2>&1
    sleep 4  # the syncing workers drain and exit
    stop_all
    S=$(python3 -c "print(sum([$(for w in 0 1 2 3; do printf '%s,' "$(tps "$d/w$w.jsonl")"; done)])/4)")
    B=$(tps "$d/base.jsonl")
    printf "%-7s %5s %-6s %12.1f %12s %7.3f\n" fleet "$H" "$C" "$S" "$B" \
      "$(python3 -c "print($S/$B)")"
  done
done
echo "logs: $DIR"
