#!/usr/bin/env bash
# What an island of 2 ranks costs per inner step against one process with the same batch:
# a lone diloco-worker at batch 2B beside an island of 2 ranks at batch B each (the same
# tokens per step, the same model; docs/worker.md "Islands"), on 127.0.0.1, no shards. Prints
# each one's tokens/s (the peer: the lone worker, measured in the same run), the ratio, and the
# island's time in its two all-reduces per step (gradients and loss).
#
# Usage: benchmarks/hosts/island_step.sh [BUILD] [--model=tiny] [--batch=4] [--steps=300]
#   Each rank and the lone worker run with --threads=1: on a machine of C cores the island's
#   ranks take two of them, the lone worker one; for the same cores per process, compare
#   ranks on separate nodes.
set -euo pipefail
build=${1:-build/release}
shift || true
model=tiny batch=4 steps=300
for a in "$@"; do
  case $a in
    --model=*) model=${a#*=} ;; --batch=*) batch=${a#*=} ;; --steps=*) steps=${a#*=} ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
worker=$build/worker/diloco-worker
[[ -x $worker ]] || { echo "no $worker: build first" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model="$model" --fragments=4 --steps="$steps" --threads=1 --eval_batches=1
        --progress_interval=1h --seed=5)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

"$worker" "${common[@]}" --batch=$((2 * batch)) --metrics_jsonl="$dir/lone.jsonl" 2>"$dir/lone.log"
pids=()
for r in 0 1; do
  "$worker" "${common[@]}" --batch="$batch" --island_rank=$r --island_size=2 \
    --island_master=127.0.0.1:"$port" --metrics_jsonl="$dir/island.jsonl" 2>"$dir/r$r.log" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

python3 - "$dir" "$steps" "$batch" "$model" <<'PY'
import json, sys
d, steps, batch, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def done(path):
    return [json.loads(l) for l in open(path) if '"event":"done"' in l][-1]
lone, island = done(f"{d}/lone.jsonl"), done(f"{d}/island.jsonl")
print(f"model {model}, {steps} steps, {2 * batch} sequences per step in both")
for name, e in (("lone worker, batch %d" % (2 * batch), lone),
                ("island of 2 ranks, batch %d each" % batch, island)):
    print(f"  {name}: {e['wall_s']:.2f} s, {1e3 * e['wall_s'] / steps:.2f} ms/step")
print(f"  ratio island / lone (time per step): {island['wall_s'] / lone['wall_s']:.3f}")
print(f"  island's all-reduces: {island['island_allreduce_ms_per_step']:.3f} ms/step "
      f"({island['island_allreduce_ms_per_step'] / (1e3 * island['wall_s'] / steps):.1%} of its step)")
PY
