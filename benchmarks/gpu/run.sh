#!/usr/bin/env bash
# Every GPU check and benchmark in one call, for the GPU machine (device tool):
#   benchmarks/gpu/run.sh BUNDLE OUT [PART...]
# BUNDLE comes from benchmarks/gpu/prepare.sh: its folder, or the packed build-gpu-carry/
# bundle.tgz that the device tool carries; OUT is the device tool's $OUT. Parts, in order
# (default all): transport (the transport and checksum benchmarks, on cores the development
# machine lacks), kernels (CUDA kernel tests and benchmark), model (CUDA model tests, the GPT-2
# benchmark and PyTorch eager on the same model), cluster (a one-shard cluster with a
# --device=cuda worker). Each runs under its own time limit, 575 s in all, so that the call
# fits one device command (600 s). Logs under OUT/<part>, one line per part in
# OUT/summary.txt; exits non-zero if any part failed.
set -u
cd "$(dirname "$0")/../.." || exit 2
bundle=${1:?usage: run.sh BUNDLE OUT [PART...]}
out=${2:?usage: run.sh BUNDLE OUT [PART...]}
shift 2
parts=("$@")
((${#parts[@]} > 0)) || parts=(transport kernels model cluster)
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -f $bundle ]]; then  # the packed bundle: unpack it beside itself
  dest=$(dirname "$bundle")
  top=$(tar -tzf "$bundle" | head -n 1 | cut -d/ -f1)
  tar -xzf "$bundle" -C "$dest" || exit 2
  bundle=$dest/$top
fi
bundle=$(cd "$bundle" && pwd) || exit 2
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
for p in "${parts[@]}"; do
  case $p in
    transport) part transport 45 benchmarks/gpu/transport_check.sh "$bundle" "$out/transport" ;;
    kernels) part kernels 180 benchmarks/kernels/gpu_check.sh "$bundle" "$out/kernels" ;;
    model) part model 260 benchmarks/model/gpu_check.sh "$bundle" "$out/model" ;;
    cluster) part cluster 90 benchmarks/gpu/cluster_check.sh "$bundle" "$out/cluster" ;;
    *)
      echo "unknown part $p (transport, kernels, model, cluster)" | tee -a "$out/summary.txt"
      status=1
      ;;
  esac
done
exit $status
