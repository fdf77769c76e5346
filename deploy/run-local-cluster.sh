#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster on 127.0.0.1 -
# 2 server shards and 3 workers training the built-in default model (the "tiny" GPT on synthetic
# Markov text with a known entropy) on CPU for about a minute. Progress lines show worker loss,
# pushes and adopted versions, and each shard's rounds and fragment versions. Stops cleanly
# (SIGTERM -> final checkpoints) and exports the global model to safetensors.
#
# Usage: deploy/run-local-cluster.sh [--duration=60s] [--workers=3] [--shards=2] [--codec=int8:256]
#                                    [--model=tiny] [--lr=3e-3] [--inner_steps=30] [--device=cpu]
# --device=cuda trains every worker on this machine's GPU (they share it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
duration=60s workers=3 shards=2 codec=int8:256 model=tiny fragments=4 inner=30 lr=3e-3 device=cpu
for a in "$@"; do
  case $a in
    --duration=*) duration=${a#*=} ;;
    --workers=*) workers=${a#*=} ;;
    --shards=*) shards=${a#*=} ;;
    --codec=*) codec=${a#*=} ;;
    --model=*) model=${a#*=} ;;
    --lr=*) lr=${a#*=} ;;
    --inner_steps=*) inner=${a#*=} ;;
    --device=*) device=${a#*=} ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done

"$root/deploy/install-deps.sh"
build=${BUILD_DIR:-$root/build/release}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" diloco-server diloco-worker diloco-ctl

run=$(mktemp -d /tmp/diloco-local.XXXXXX)
echo "== run directory: $run (stores, logs, metrics, exported model)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

for ((s = 0; s < shards; s++)); do
  "$build/server/diloco-server" --bind='tcp://127.0.0.1:*' --port_file="$run/shard$s.endpoint" \
    --shard=$s --shards=$shards --fragments=$fragments --model=$model --store="$run/store$s" \
    --progress_interval=5s --metrics_jsonl="$run/shard$s.jsonl" &
  pids+=($!)
done
servers=""
for ((s = 0; s < shards; s++)); do
  for _ in $(seq 100); do [[ -s $run/shard$s.endpoint ]] && break; sleep 0.1; done
  servers+="${servers:+,}$(cat "$run/shard$s.endpoint")"
done
echo "== shards: $servers"

wpids=()
for ((w = 0; w < workers; w++)); do
  "$build/worker/diloco-worker" --servers="$servers" --worker_id=$w --num_workers=$workers \
    --fragments=$fragments --model=$model --codec=$codec --inner_steps=$inner \
    --lr=$lr --duration=$duration --threads=1 --device="$device" --progress_interval=5s \
    --metrics_jsonl="$run/worker$w.jsonl" &
  wpids+=($!)
  pids+=($!)
done
status=0
for p in "${wpids[@]}"; do wait "$p" || status=$?; done
for ((s = 0; s < shards; s++)); do kill -TERM "${pids[$s]}"; done
for ((s = 0; s < shards; s++)); do wait "${pids[$s]}" || status=$?; done
trap - EXIT

echo "== shard stores after shutdown"
for ((s = 0; s < shards; s++)); do "$build/ctl/diloco-ctl" show --store="$run/store$s"; done
stores=$(for ((s = 0; s < shards; s++)); do printf '%s ' "$run/store$s"; done)
"$build/ctl/diloco-ctl" export --model=$model --fragments=$fragments --shards=$shards \
  --out="$run/global.safetensors" $stores
echo "== global model exported to $run/global.safetensors"
exit $status
