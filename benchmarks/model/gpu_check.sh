#!/usr/bin/env bash
# GPU checks of the worker's model, for the GPU machine. Usage:
#   benchmarks/model/gpu_check.sh BUILD_DIR OUT_DIR [batch=N] [steps=N]
# Runs the CUDA model tests (CUDA vs CPU reference, CUDA trainer), the GPU benchmark
# (GPT-2 124M and 350M, TF32) and the same model in PyTorch eager (explicit attention and
# scaled_dot_product_attention), and prints our/PyTorch tokens/s ratios. Logs go to OUT_DIR.
# Fails when any part fails, when a CUDA test was skipped (all but the two-GPU test and NCCL's loader, which need
# a second GPU), or when a benchmark printed no RESULT line: a machine whose CUDA runtime does
# not work skips every test and measures nothing, and that is not a pass. The binaries need the Abseil/OpenBLAS .so files of the
# build machine: put them in BUILD_DIR/lib (or set LD_LIBRARY_PATH) when that machine lacks them.
set -u
build=${1:?usage: gpu_check.sh BUILD_DIR OUT_DIR}
out=${2:?usage: gpu_check.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi > "$out/nvidia-smi.log" 2>&1
status=0
"$build/tests/model/model_cuda_test" > "$out/model_cuda_test.log" 2>&1 || status=1
tail -5 "$out/model_cuda_test.log"
skipped=$(grep -E '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$out/model_cuda_test.log" | grep -vE 'TwoGpusDataParallel|NcclLoader')
if [ -n "$skipped" ]; then
  echo "model_cuda_test: tests were SKIPPED (no usable GPU?):"
  echo "$skipped"
  status=1
fi
# has_results LOG NAME: fails (and says so) when LOG holds no RESULT line.
has_results() {
  grep -q '^RESULT ' "$1" && return 0
  echo "$2: no RESULT line (see $1)"
  return 1
}
# Only the arguments after BUILD_DIR and OUT_DIR belong to the benchmark (batch=, steps=).
"$build/benchmarks/model/model_gpu_bench" "${@:3}" > "$out/model_gpu_bench.log" 2>&1 || status=1
cat "$out/model_gpu_bench.log"
has_results "$out/model_gpu_bench.log" model_gpu_bench || status=1
# PyTorch gets the same batch and step count.
torch_args=()
for a in "${@:3}"; do
  case $a in
    batch=*) torch_args+=(--batch "${a#batch=}") ;;
    steps=*) torch_args+=(--steps "${a#steps=}") ;;
  esac
done
python3 "$here/torch_gpt2.py" "${torch_args[@]}" > "$out/torch_gpt2.log" 2>&1 || status=1
python3 "$here/torch_gpt2.py" "${torch_args[@]}" --sdpa >> "$out/torch_gpt2.log" 2>&1 || status=1
cat "$out/torch_gpt2.log"
has_results "$out/torch_gpt2.log" torch_gpt2.py || status=1
python3 - "$out/model_gpu_bench.log" "$out/torch_gpt2.log" <<'PY' | tee "$out/ratio.log"
import sys
def results(path):
    r = {}
    for line in open(path):
        if line.startswith("RESULT "):
            _, name, tps, tflops = line.split()
            r[name] = (float(tps), float(tflops))
    return r
ours, torch = results(sys.argv[1]), results(sys.argv[2])
for name in ours:
    model = name.removesuffix("-materialized")  # both attentions against the same PyTorch runs
    for peer, what in ((model, "PyTorch eager"), (model + "-sdpa", "PyTorch eager + SDPA")):
        if peer in torch:
            print(f"{name}: ours {ours[name][0]:.0f} tok/s ({ours[name][1]:.1f} TFLOP/s), "
                  f"{what} {torch[peer][0]:.0f} tok/s ({torch[peer][1]:.1f} TFLOP/s), "
                  f"ratio {ours[name][0] / torch[peer][0]:.2f}")
PY
exit $status
