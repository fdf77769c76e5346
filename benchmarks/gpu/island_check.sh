#!/usr/bin/env bash
# An island's GPU rank through the NCCL path, on the GPU machine. That machine has one GPU and
# NCCL takes no two ranks on one device, so the island is of one rank, made to meet at its
# rendezvous and run its collectives all the same (--island_rendezvous_alone): rank 0's NCCL
# unique id through the store, the communicator created non-blocking on the local rank's GPU,
# the bounded all-reduces of gradients and loss every step, and the 1/ranks scaling. Its loss
# at every step must equal a lone --device=cuda worker's at the same batch within fp tolerance
# (the sum over one rank is the identity). The sums of several ranks need 2+ GPUs. First
# island_nccl_test: the rank's communicator alone, and one whose peer never comes failing within
# its timeout.
# Usage: benchmarks/gpu/island_check.sh BUNDLE OUT
# GPU_DEVICE=cpu runs both on the CPU, the rank over gloo: a dry run of this script where there
# is no GPU.
set -u
bundle=${1:?usage: island_check.sh BUNDLE OUT}
out=${2:?usage: island_check.sh BUNDLE OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
worker=$bundle/worker/diloco-worker
device=${GPU_DEVICE:-cuda}
if [[ $device == cuda ]] && ! "$bundle/tests/island/island_nccl_test" >"$out/nccl_test.log" 2>&1; then
  echo "island: island_nccl_test failed"; grep -E 'FAILED|Failure' -A3 "$out/nccl_test.log" | head
  exit 1
fi
path="NCCL on GPU 0"
[[ $device == cuda ]] || path=gloo
common=(--device="$device" --gpus=1 --model=tiny --steps=40 --batch=8 --seed=5 --eval_batches=1
        --progress_interval=0s --worker_id=0)

if ! "$worker" "${common[@]}" --metrics_jsonl="$out/lone.jsonl" >"$out/lone.log" 2>&1; then
  echo "island: the lone --device=cuda worker failed"; tail -3 "$out/lone.log"; exit 1
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if ! "$worker" "${common[@]}" --island_rank=0 --island_size=1 --island_rendezvous_alone \
  --island_master="127.0.0.1:$port" --island_timeout=30s --metrics_jsonl="$out/island.jsonl" \
  >"$out/island.log" 2>&1; then
  echo "island: the island's GPU rank failed"; tail -3 "$out/island.log"; exit 1
fi
if ! grep -q "gradients over $path" "$out/island.log"; then
  echo "island: the rank's gradients did not go over $path"; tail -3 "$out/island.log"; exit 1
fi

python3 - "$out" "$path" <<'PY'
import json, sys
out = sys.argv[1]
def events(name, kind):
    return [e for e in map(json.loads, open(f"{out}/{name}.jsonl")) if e.get("event") == kind]
def losses(name):
    return {e["step"]: e["loss"] for e in events(name, "progress")}
lone, island = losses("lone"), losses("island")
done = events("island", "done")
bad = [s for s in lone if s not in island or abs(island[s] - lone[s]) > 1e-4 * abs(lone[s])]
ok = len(lone) == 40 and not bad and done and done[-1].get("island_size") == 1
worst = max((abs(island.get(s, 0) - lone[s]) for s in lone), default=float("nan"))
print(f"island: {len(island)} steps over {sys.argv[2]}, loss {island.get(1, 0):.4f} -> "
      f"{island.get(40, 0):.4f}; lone worker {lone.get(1, 0):.4f} -> {lone.get(40, 0):.4f}; "
      f"largest difference {worst:.2e}" + (f"; steps apart: {bad[:5]}" if bad else ""))
print("island:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
