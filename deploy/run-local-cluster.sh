#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster on 127.0.0.1 -
# 2 server shards and 3 workers training the built-in default model (the "tiny" GPT on synthetic
# Markov text with a known entropy) on CPU for about a minute. Progress lines show worker loss,
# pushes and adopted versions, and each shard's rounds and fragment versions. Stops cleanly
# (SIGTERM -> final checkpoints), exports the global model to safetensors and prints its
# held-out loss (the workers' held-out set, every chain of the mixture equally) with the entropy
# floor, and draws the run's report (deploy/run_report.py: PNGs in the run directory, the global
# model's held-out loss among them). Settings: deploy/flags/local-{worker,server}.flags, the ones
# the convergence study measures (benchmarks/quality/run.sh, group g). Every worker draws its own
# batches from the whole mixture (--split=iid, the default: the fleet's export held 0.915x the
# lone worker's loss against 0.974x with owned shares, benchmarks/quality/RESULTS.md);
# --split=owned gives each worker a non-IID share (80% from the chains it owns; every chain is
# some worker's own).
#
# Usage: deploy/run-local-cluster.sh [--duration=60s] [--workers=3] [--shards=2] [--codec=C]
#                                    [--model=M] [--lr=LR] [--inner_steps=H] [--device=cpu]
#                                    [--split=iid|owned]
# Flags left out take the flag files' values. --device=cuda trains every worker on this
# machine's GPU (they share it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
duration=60s workers=3 shards=2 device=cpu split=iid
worker_extra=() model_flag=()
for a in "$@"; do
  case $a in
    --duration=*) duration=${a#*=} ;;
    --workers=*) workers=${a#*=} ;;
    --shards=*) shards=${a#*=} ;;
    --codec=* | --lr=* | --inner_steps=*) worker_extra+=("$a") ;;
    --model=*) model_flag=("$a") ;;
    --device=*) device=${a#*=} ;;
    --split=iid | --split=owned) split=${a#*=} ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
worker_flags=$root/deploy/flags/local-worker.flags
server_flags=$root/deploy/flags/local-server.flags
model=$(sed -n 's/^--model=//p' "$worker_flags")
[[ ${#model_flag[@]} -eq 0 ]] || model=${model_flag[0]#*=}
fragments=$(sed -n 's/^--fragments=//p' "$worker_flags")

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
  "$build/server/diloco-server" --flagfile="$server_flags" --model="$model" \
    --bind='tcp://127.0.0.1:*' --port_file="$run/shard$s.endpoint" --shard=$s --shards=$shards \
    --store="$run/store$s" --progress_interval=5s --metrics_jsonl="$run/shard$s.jsonl" &
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
  # iid: the whole mixture, a batch order of its own (theta(0) from the flag file's init seed);
  # owned: the worker's share of the chains.
  if [[ $split == iid ]]; then data=(--num_workers=1 --seed=$((1000 + w))); else
    data=(--num_workers=$workers); fi
  # Worker 0 scores the global model it last adopted on the held-out set every 250 steps (its
  # "eval" events: the report's heldout.png); the others train without pausing for it.
  eval=(); ((w == 0)) && eval=(--eval_every=250)
  "$build/worker/diloco-worker" --flagfile="$worker_flags" --model="$model" "${worker_extra[@]}" \
    --servers="$servers" --worker_id=$w "${data[@]}" "${eval[@]}" --duration=$duration \
    --device="$device" --progress_interval=5s --metrics_jsonl="$run/worker$w.jsonl" &
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
"$build/ctl/diloco-ctl" export --model="$model" --fragments=$fragments --shards=$shards \
  --out="$run/global.safetensors" $stores
echo "== global model exported to $run/global.safetensors"
echo "== the global model's held-out loss (what a user gets; diloco-ctl eval --data=synthetic)"
# shellcheck disable=SC2086
"$build/ctl/diloco-ctl" eval --model="$model" --params="$run/global.safetensors" \
  --data=synthetic --eval_batches=64
echo "== the run's report: loss, held-out loss, bytes, pushes per round, goodput (PNGs)"
"$root/deploy/run_report.py" "$run" || status=$?
exit $status
