#!/usr/bin/env bash
# A GPU part's verdict where there is no usable GPU (benchmarks/gpu/run.sh calls it instead of
# the part): every program of the part starts from the bundle and says, in its own words, that
# it found no GPU. Writes one line per program to OUT/no_gpu.txt and the part's verdict
#   PART: no GPU (N programs started: ...)
# to stdout. Exits 3 when every program behaved so (the rehearsal's pass: rehearse.sh), 1 when
# one did not start or did not say why.
# Usage: benchmarks/gpu/no_gpu_check.sh BUNDLE OUT PART
#   (PART: kernels, model, cluster, island, learner)
set -u
bundle=${1:?usage: no_gpu_check.sh BUNDLE OUT PART}
out=${2:?usage: no_gpu_check.sh BUNDLE OUT PART}
part=${3:?usage: no_gpu_check.sh BUNDLE OUT PART}
mkdir -p "$out"
started=() status=3
# expect NAME EXIT PATTERN COMMAND...: COMMAND exits EXIT and its output matches PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 3
  local log="$out/$name.log" rc
  timeout 60 "$@" >"$log" 2>&1
  rc=$?
  if ((rc == want)) && grep -qE -- "$pattern" "$log"; then
    started+=("$name")
    echo "$name: exit $rc, $(grep -m1 -E -- "$pattern" "$log")" >>"$out/no_gpu.txt"
  else
    echo "$name: exit $rc (expected $want and /$pattern/): $(tail -n 2 "$log" | tr '\n' ' ')" |
      tee -a "$out/no_gpu.txt"
    status=1
  fi
}
case $part in
  kernels)
    # Every CUDA test skips (exit 0) and says so; the benchmark refuses to measure.
    expect kernels_cuda_test 0 'SKIPPED' "$bundle/tests/kernels/kernels_cuda_test"
    expect diloco-bench-kernels-gpu 2 'no usable CUDA device' \
      "$bundle/benchmarks/kernels/diloco-bench-kernels-gpu" --n=1024 --reps=1
    ;;
  model)
    expect model_cuda_test 0 'SKIPPED' "$bundle/tests/model/model_cuda_test"
    expect model_gpu_bench 1 'no CUDA GPU: nothing measured' \
      "$bundle/benchmarks/model/model_gpu_bench" steps=1
    ;;
  cluster)
    expect diloco-server 0 'diloco-server' "$bundle/server/diloco-server" --version
    expect diloco-worker-cpu 0 'done after 5 steps' "$bundle/worker/diloco-worker" \
      --device=cpu --model=tiny --steps=5
    expect diloco-worker-cuda 2 'CUDA GPUs usable on this machine' \
      "$bundle/worker/diloco-worker" --device=cuda --model=tiny --steps=1
    ;;
  island)
    # An island of one that meets, on the CPU (the path's gloo side), then the GPU rank, which
    # must name the GPU it lacks before any rendezvous.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    alone=(--island_rank=0 --island_size=1 --island_rendezvous_alone
           --island_master="127.0.0.1:$port")
    expect island_nccl_test 0 'SKIPPED' "$bundle/tests/island/island_nccl_test"
    expect diloco-worker-island-cpu 0 'done after 5 steps' "$bundle/worker/diloco-worker" \
      --device=cpu --model=tiny --steps=5 "${alone[@]}"
    expect diloco-worker-island-cuda 2 'rank 0: .* but this node has 0 GPUs' \
      "$bundle/worker/diloco-worker" --device=cuda --model=tiny --steps=1 "${alone[@]}"
    ;;
  learner)
    # The part's own programs (the shard, and diloco-ctl for the data); the Python module is
    # built for the GPU machine's Python, not this one's.
    expect diloco-ctl 0 'tokens' "$bundle/ctl/diloco-ctl" gen-data --heldout \
      --out="$out/heldout.bin"
    expect diloco-server 0 'diloco-server' "$bundle/server/diloco-server" --version
    ;;
  *)
    echo "no_gpu_check: unknown part $part (kernels, model, cluster, island, learner)" >&2
    exit 2
    ;;
esac
if ((status == 3)); then
  echo "$part: no GPU (${#started[@]} programs started: ${started[*]})"
else
  echo "$part: FAILED without a GPU (see $out/no_gpu.txt)"
fi
exit $status
