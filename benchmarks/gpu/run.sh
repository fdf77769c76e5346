#!/usr/bin/env bash
# Every GPU check and benchmark in one call, for the GPU machine (device tool):
#   benchmarks/gpu/run.sh BUNDLE OUT
# BUNDLE comes from benchmarks/gpu/prepare.sh (carried); OUT is the device tool's $OUT. Runs the
# CUDA kernel tests and kernel benchmark (issue 4), then the CUDA model tests, the GPT-2
# benchmark and PyTorch eager on the same model (issue 7), each under its own time limit so that
# the whole call stays within one device command (600 s). Logs under OUT/kernels and
# OUT/model, one line per part in OUT/summary.txt; exits non-zero if any part failed.
set -u
cd "$(dirname "$0")/../.." || exit 2
bundle=$(cd "${1:?usage: run.sh BUNDLE OUT}" && pwd)
out=${2:?usage: run.sh BUNDLE OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$out/machine.txt"
cat "$out/machine.txt"

status=0
part() {  # part NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=1
}
part kernels 240 benchmarks/kernels/gpu_check.sh "$bundle" "$out/kernels"
part model 300 benchmarks/model/gpu_check.sh "$bundle" "$out/model"
exit $status
