#!/usr/bin/env bash
# The GPU checks and benchmarks, for the GPU machine (device tool):
#   benchmarks/gpu/run.sh BUNDLE OUT [PART...]
# BUNDLE comes from benchmarks/gpu/prepare.sh: its folder, or the packed build-gpu-carry/
# bundle.tgz that the device tool carries; OUT is the device tool's $OUT. Parts (default all,
# in this order), each with its limit and what it took on an H200 on 2026-12-04:
#   kernels    CUDA kernel tests and benchmark                                 150 s (38 s)
#   model      CUDA model tests, the GPT-2 benchmark, PyTorch eager alike      240 s (46 s)
#   cluster    one shard, a --device=cuda worker and a CPU worker               90 s (41 s)
#   island     an island's GPU rank through NCCL vs a lone GPU worker          60 s (not run yet)
#   learner    the PyTorch learner on CUDA parameters (learner_check.sh)      180 s (142 s)
#   transport  the transport and checksum benchmarks on 16 cores               45 s (29 s)
#   rejoin     rejoin time at 124M and 1.26B in 128 GiB (rejoin_check.sh)     300 s (not run yet)
# A cold start of the machine costs about 60-75 s of the session's device time, so group
# parts into a few commands under the 600 s a command may run, the ones no other machine can
# give first. The learner part needs diloco_ps built for that machine's Python, from headers
# packed there, so the first command packs them too:
#   benchmarks/gpu/python_headers.sh $OUT && \
#     benchmarks/gpu/run.sh build-gpu-carry/bundle.tgz $OUT kernels model cluster transport
# then here `DILOCO_GPU_PYTHON_HEADERS=<files_at>/python_headers.tgz benchmarks/gpu/prepare.sh`
# (the device tool brings back a limited number of files: on 2026-12-04 the top-level ones came
# first), and `run.sh build-gpu-carry/bundle.tgz $OUT learner rejoin`; rerun a failed part
# alone. Every part writes its logs under OUT/<part> as it goes, so one killed at its limit
# still returns what it measured; one line per part in OUT/summary.txt; exits 1 if any part
# failed, 3 if there was no GPU (every GPU part's programs started and said so:
# benchmarks/gpu/no_gpu_check.sh), else 0.
# benchmarks/gpu/rehearse.sh runs this driver here, without a GPU, against the packed bundle.
set -u
cd "$(dirname "$0")/../.." || exit 2
bundle=${1:?usage: run.sh BUNDLE OUT [PART...]}
out=${2:?usage: run.sh BUNDLE OUT [PART...]}
shift 2
parts=("$@")
((${#parts[@]} > 0)) || parts=(kernels model cluster island learner transport rejoin)
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
# The toolkit's own folders last: the binaries' run path names the build machine's
# (/usr/local/cuda/lib), which other machines often lay out as lib64.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && LD_LIBRARY_PATH+=":$d"
done
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "ldconfig -p (CUDA runtime, cuBLAS, NCCL):"
  ldconfig -p 2>&1 | grep -E 'lib(cudart|cublas|cublasLt|nccl)\.so' || echo "  none in ld.so.cache"
} > "$out/machine.txt"
cat "$out/machine.txt"
# The bundle leaves the CUDA libraries out: the runtime is linked statically and cuBLAS and
# NCCL are loaded when a GPU trainer needs them (worker/model/cuda/library_search.h; the ldconfig
# lines above show what the loader knows). Every other library must resolve from the bundle or
# the machine: stop here, clearly, when one does not.
for p in tests/model/model_cuda_test tests/kernels/kernels_cuda_test worker/diloco-worker \
  server/diloco-server; do
  [[ -x $bundle/$p ]] || continue
  ldd "$bundle/$p" 2>&1 | grep 'not found' | sed "s|^|$p: |"
done 2>&1 | tee "$out/libraries.txt"
if [[ -s $out/libraries.txt ]]; then
  echo "a shared library is missing (see $out/libraries.txt): set LD_LIBRARY_PATH to the" \
    "folder that holds it" | tee -a "$out/summary.txt"
  exit 1
fi
# Without a usable GPU (nvidia-smi lists none) the GPU parts give the verdict "no GPU" once their
# programs have shown that they start (benchmarks/gpu/no_gpu_check.sh), and run.sh exits 3.
gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu=1

status=0
part() {  # part NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS rc
  if ((gpu == 0)) && [[ $name != transport && $name != rejoin ]]; then
    timeout "$limit" benchmarks/gpu/no_gpu_check.sh "$bundle" "$out/$name" "$name" |
      tee -a "$out/summary.txt"
    rc=${PIPESTATUS[0]}
    if ((rc == 3)); then
      ((status == 0)) && status=3
      return
    fi
  else
    timeout "$limit" "$@"
    rc=$?
  fi
  echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=1
}
for p in "${parts[@]}"; do
  case $p in
    transport) part transport 45 benchmarks/gpu/transport_check.sh "$bundle" "$out/transport" ;;
    rejoin) part rejoin 300 benchmarks/gpu/rejoin_check.sh "$bundle" "$out/rejoin" ;;
    kernels) part kernels 150 benchmarks/kernels/gpu_check.sh "$bundle" "$out/kernels" ;;
    model) part model 240 benchmarks/model/gpu_check.sh "$bundle" "$out/model" ;;
    cluster) part cluster 90 benchmarks/gpu/cluster_check.sh "$bundle" "$out/cluster" ;;
    island) part island 60 benchmarks/gpu/island_check.sh "$bundle" "$out/island" ;;
    learner) part learner 180 benchmarks/gpu/learner_check.sh "$bundle" "$out/learner" ;;
    *)
      echo "unknown part $p (kernels, model, cluster, island, learner, transport, rejoin)" |
        tee -a "$out/summary.txt"
      status=1
      ;;
  esac
done
exit $status
