#!/usr/bin/env bash
# Runs the CUDA kernel tests and the GPU kernel benchmark on a machine with a GPU.
# Usage: benchmarks/kernels/gpu_check.sh BUILD_DIR OUT_DIR [extra benchmark flags]
# Writes OUT_DIR/kernels_cuda_test.log (+ .xml) and OUT_DIR/bench_kernels_gpu.log; exits non-zero
# if the tests fail or any test was skipped (a skip here means the GPU was not usable).
set -u
build="${1:?usage: gpu_check.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: gpu_check.sh BUILD_DIR OUT_DIR}"
shift 2
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.log" 2>&1 || true

test_bin="$build/tests/kernels/kernels_cuda_test"
bench_bin="$build/benchmarks/kernels/diloco-bench-kernels-gpu"
status=0

if [[ -x "$test_bin" ]]; then
  timeout 300 "$test_bin" --gtest_output="xml:$out/kernels_cuda_test.xml" \
    > "$out/kernels_cuda_test.log" 2>&1
  rc=$?
  echo "kernels_cuda_test exit $rc" | tee -a "$out/summary.txt"
  [[ $rc -eq 0 ]] || status=1
  if grep -q "SKIPPED" "$out/kernels_cuda_test.log"; then
    echo "kernels_cuda_test: tests were SKIPPED (no usable GPU?)" | tee -a "$out/summary.txt"
    status=1
  fi
  grep -E "^\[  (PASSED|FAILED) " "$out/kernels_cuda_test.log" | tee -a "$out/summary.txt"
else
  echo "missing $test_bin" | tee -a "$out/summary.txt"
  status=1
fi

if [[ -x "$bench_bin" ]]; then
  timeout 300 "$bench_bin" "$@" > "$out/bench_kernels_gpu.log" 2>&1
  rc=$?
  echo "diloco-bench-kernels-gpu exit $rc" | tee -a "$out/summary.txt"
  [[ $rc -eq 0 ]] || status=1
  cat "$out/bench_kernels_gpu.log"
else
  echo "missing $bench_bin" | tee -a "$out/summary.txt"
  status=1
fi
exit $status
