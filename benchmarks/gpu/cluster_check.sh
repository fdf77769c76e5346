#!/usr/bin/env bash
# Mixed hardware end to end, on the GPU machine: one diloco-server shard on 127.0.0.1, one worker
# training on the GPU (--device=cuda) and one on the CPU, the "small" model on synthetic data,
# for DURATION seconds. Passes when both workers exit 0, the GPU worker's pushes were applied,
# both adopted global fragments, and the GPU worker's held-out loss fell.
# Usage: benchmarks/gpu/cluster_check.sh BUNDLE OUT [DURATION]   (BUNDLE: see prepare.sh)
# GPU_DEVICE=cpu runs worker 0 on the CPU too: a dry run of this script where there is no GPU.
set -u
bundle=${1:?usage: cluster_check.sh BUNDLE OUT [DURATION]}
out=${2:?usage: cluster_check.sh BUNDLE OUT [DURATION]}
duration=${3:-40}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
common=(--model=small --fragments=4)

"$bundle/server/diloco-server" "${common[@]}" --shards=1 --shard=0 --store="$out/store" \
  --bind='tcp://127.0.0.1:*' --port_file="$out/endpoint" --progress_interval=10s \
  --metrics_jsonl="$out/shard.jsonl" >"$out/shard.log" 2>&1 &
server=$!
for _ in $(seq 100); do [[ -s $out/endpoint ]] && break; sleep 0.1; done
if [[ ! -s $out/endpoint ]]; then
  echo "cluster: the shard did not start"; tail -5 "$out/shard.log"; kill -KILL $server; exit 1
fi
endpoint=$(cat "$out/endpoint")

pids=()
for w in 0 1; do
  device=${GPU_DEVICE:-cuda}
  ((w == 1)) && device=cpu
  "$bundle/worker/diloco-worker" "${common[@]}" --servers="$endpoint" --worker_id=$w \
    --num_workers=2 --device="$device" --inner_steps=20 --duration="${duration}s" \
    --progress_interval=10s --metrics_jsonl="$out/worker$w.jsonl" >"$out/worker$w.log" 2>&1 &
  pids+=($!)
done
status=0
for w in 0 1; do
  wait "${pids[$w]}" || { echo "cluster: worker $w exited $?"; status=1; }
  tail -2 "$out/worker$w.log"
done
kill -TERM $server
wait $server || { echo "cluster: the shard exited $?"; status=1; }
tail -1 "$out/shard.log"

python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
def done(w):
    for line in open(f"{out}/worker{w}.jsonl"):
        e = json.loads(line)
        if e.get("event") == "done":
            return e
    raise SystemExit(f"cluster: worker {w} wrote no done event")
gpu, cpu = done(0), done(1)
print(f"cluster: GPU worker {gpu['steps']} steps, {gpu['applied']} pushes applied, loss "
      f"{gpu['eval_initial']:.3f} -> {gpu['eval_local']:.3f}; CPU worker {cpu['steps']} steps, "
      f"{cpu['applied']} applied")
ok = gpu["applied"] > 0 and gpu["eval_local"] < gpu["eval_initial"] - 0.5
ok = ok and gpu["joined"] == 4 and cpu["joined"] == 4
print("cluster:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
exit $status
