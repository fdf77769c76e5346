#!/usr/bin/env bash
# The PyTorch learner on CUDA parameters, on the GPU machine: the Llama-style example
# (python/examples/llama_learner.py, diloco_ps) trains on the GPU against one diloco-server
# shard on 127.0.0.1, in float32 (TF32 products) and in bfloat16, each beside the same loop
# without the learner (--no_learner) on the same GPU. Prints per dtype the seconds per step with
# and without the learner and their ratio (the learner's utilization), the pushes applied, and
# the held-out loss of the learner's model at the end; then bf16's loss against fp32's.
# The shard's outer step is the identity (--outer_lr=1 --outer_momentum=0): the global model is
# then the lone learner's own after each round, up to the int8 push's rounding, so the learner's
# held-out loss must match the loop's alone: a check of the copies between the GPU and the host
# (pushed fragments down, adopted ones up) that the default outer Nesterov step would hide (a
# lone learner under it overshoots: at lr 1.3 and momentum 0.7 each round moves ~4x its delta).
# Then an island of 2 ranks on that GPU (DDP over gloo) against its own shard. Passes when
# every run exits 0, every learner's pushes were applied, each held-out loss is within 5% of the
# loop's alone in the same dtype, and the island's ranks end with identical parameters.
# Usage: benchmarks/gpu/learner_check.sh BUNDLE OUT [STEPS]
# BUNDLE/python must hold diloco_ps built for this machine's python3 (prepare.sh does so when
# given that Python's headers: benchmarks/gpu/python_headers.sh says how); without it the part
# fails at once, saying so. LEARNER_DEVICE=cpu trains llama.py's default (tiny) model on the CPU
# instead: a dry run of this script where there is no GPU.
set -u
bundle=${1:?usage: learner_check.sh BUNDLE OUT [STEPS]}
out=${2:?usage: learner_check.sh BUNDLE OUT [STEPS]}
steps=${3:-400}
here=$(cd "$(dirname "$0")/../.." && pwd)
examples=$here/python/examples
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$bundle/python"
if ! python3 -c 'import diloco_ps' >"$out/import.log" 2>&1; then
  echo "learner: diloco_ps does not import for $(python3 -V 2>&1) (see $out/import.log):" \
    "prepare.sh builds it only when given that Python's headers (python_headers.sh)"
  tail -3 "$out/import.log"
  exit 1
fi
ctl=$bundle/ctl/diloco-ctl
device=${LEARNER_DEVICE:-cuda}
# About 75M parameters: 12 layers of width 768 (12 heads, 4 key/value heads), a 256-token
# vocabulary (the synthetic data's), 512 tokens of context.
size=(--hidden_size=768 --intermediate_size=2048 --num_hidden_layers=12 --num_attention_heads=12
      --num_key_value_heads=4 --max_position_embeddings=512)
[[ $device == cpu ]] && size=()
python3 "$examples/llama.py" --out="$out/llama" "${size[@]}" >"$out/model.log" 2>&1 ||
  { cat "$out/model.log"; exit 1; }
cat "$out/model.log"
"$ctl" gen-data --heldout --out="$out/heldout.bin" >/dev/null || exit 1
common=(--model_dir="$out/llama" --worker_id=0 --num_workers=1 --ctl="$ctl" --device="$device"
        --steps="$steps" --batch=8 --fragments=4 --inner_steps=50 --progress=100
        --eval="$out/heldout.bin")

# start_shard NAME MODEL_DIR [FLAG...]: one shard of the folder on 127.0.0.1, its pid in
# $server and its endpoint in $endpoint; exits the script when it does not start.
start_shard() {
  local name=$1 model=$2
  shift 2
  "$bundle/server/diloco-server" --model=hf:"$model" --fragments=4 --shards=1 --shard=0 "$@" \
    --store="$out/store_$name" --bind='tcp://127.0.0.1:*' --port_file="$out/endpoint_$name" \
    --progress_interval=30s >"$out/shard_$name.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do [[ -s $out/endpoint_$name ]] && break; sleep 0.1; done
  if [[ ! -s $out/endpoint_$name ]]; then
    echo "learner: the shard ($name) did not start"; tail -5 "$out/shard_$name.log"
    kill -KILL $server
    exit 1
  fi
  endpoint=$(cat "$out/endpoint_$name")
}

status=0
for dtype in float32 bfloat16; do
  log=$out/alone_$dtype.log
  timeout 120 python3 "$examples/llama_learner.py" "${common[@]}" --dtype=$dtype --no_learner \
    --servers=none >"$log" 2>&1 ||
    { echo "learner: the loop alone ($dtype) failed"; tail -5 "$log"; status=1; }
  start_shard "$dtype" "$out/llama" --outer_lr=1 --outer_momentum=0
  log=$out/learner_$dtype.log
  timeout 150 python3 "$examples/llama_learner.py" "${common[@]}" --dtype=$dtype \
    --servers="$endpoint" >"$log" 2>&1 ||
    { echo "learner: the learner ($dtype) failed"; tail -5 "$log"; status=1; }
  tail -2 "$log"
  kill -TERM $server
  wait $server || { echo "learner: the shard ($dtype) exited $?"; status=1; }
done
# An island of 2 ranks (llama_island.py: DDP, rank 0's learner, adopted fragments broadcast)
# on the same GPU, so gloo (NCCL takes one GPU per rank), llama.py's small default model: its
# parameters are CUDA tensors; the script exits non-zero when the ranks differ after the drain.
python3 "$examples/llama.py" --out="$out/tiny" >/dev/null 2>&1 ||
  { echo "learner: llama.py"; exit 1; }
start_shard island "$out/tiny"
timeout 120 python3 "$examples/llama_island.py" --servers="$endpoint" \
  --worker_id=0 --num_workers=1 --ranks=2 --device="$device" --backend=gloo \
  --model_dir="$out/tiny" --ctl="$ctl" --steps=60 --inner_steps=10 --progress=30 \
  >"$out/island.log" 2>&1 ||
  { echo "learner: the island failed"; tail -5 "$out/island.log"; status=1; }
tail -1 "$out/island.log" | cut -c1-300
kill -TERM $server
wait $server || { echo "learner: the island's shard exited $?"; status=1; }
((status == 0)) || exit 1

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def last(path):
    return json.loads(open(path).read().strip().splitlines()[-1])
ok, loss = True, {}
for dtype in ("float32", "bfloat16"):
    alone, with_ = last(f"{out}/alone_{dtype}.log"), last(f"{out}/learner_{dtype}.log")
    util = alone["step_s"] / with_["step_s"]
    loss[dtype] = with_["heldout_loss"]
    print(f"learner {dtype}: {with_['step_s'] * 1e3:.1f} ms/step with the learner, "
          f"{alone['step_s'] * 1e3:.1f} alone, utilization {util:.3f}; pushes "
          f"{with_['pushes']} applied {with_['applied']} adopted {with_['adoptions']}; held-out "
          f"loss {with_['heldout_loss']:.4f} (alone {alone['heldout_loss']:.4f})")
    if with_.get("due_ms") is not None and alone.get("other_ms") is not None:
        print(f"  by the GPU's clock: {with_['due_steps']} steps that copied a fragment "
              f"{with_['due_ms']:.1f} ms each, the {with_['other_steps']} others "
              f"{with_['other_ms']:.1f} ms; alone {alone['other_ms']:.1f} ms")
    ok = ok and with_["applied"] > 0
    ok = ok and abs(with_["heldout_loss"] / alone["heldout_loss"] - 1) <= 0.05
print(f"learner: bf16 held-out loss / fp32's = {loss['bfloat16'] / loss['float32']:.4f}")
island = last(f"{out}/island.log")
print(f"island of {island['ranks']} ranks: pushes {island['pushes']} applied {island['applied']} "
      f"adopted {island['adoptions']}; the ranks' checksums after the drain {island['checksums']}")
ok = ok and island["applied"] > 0 and len(set(island["checksums"])) == 1
print("learner:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
