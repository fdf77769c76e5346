#!/usr/bin/env bash
# Builds everything the GPU machine runs (CUDA tests, GPU benchmarks, a one-shard cluster with a
# GPU worker, the transport benchmarks) into one folder, and packs it for the device tool
# (that machine has CUDA, cuBLAS, NCCL and PyTorch, but no ZeroMQ, RocksDB,
# FlatBuffers, Abseil or OpenBLAS, and no network). Then, on the GPU machine, one device command
# per part (carry: build-gpu-carry), kernels first (benchmarks/gpu/run.sh says why and the limits):
#   benchmarks/gpu/run.sh build-gpu-carry/bundle.tgz "$OUT" kernels      (then model, cluster,
#   transport)
# Usage: benchmarks/gpu/prepare.sh [BUNDLE]     (default build-gpu-bundle, ignored by git)
# With DILOCO_GPU_PYTHON_HEADERS=TGZ (the GPU machine's Python headers, python_headers.sh) the
# bundle also holds diloco_ps built for that Python (python/, python_module.sh), which the learner
# part imports; without it that part says the module is missing.
# The bundle mirrors the build tree for the programs below, so the per-part scripts
# (benchmarks/kernels/gpu_check.sh, benchmarks/model/gpu_check.sh) run on it unchanged, plus
# lib/ with every shared library they load that is neither glibc's, the compiler's nor CUDA's.
# It is packed into build-gpu-carry/bundle.tgz (gzip: ~25 MiB of ~73), which is what travels:
# the device tool carries 64 MiB in all.
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-build-gpu-bundle}
build=${DILOCO_GPU_BUILD:-build-gpu}
programs=(tests/kernels/kernels_cuda_test benchmarks/kernels/diloco-bench-kernels-gpu
          tests/model/model_cuda_test benchmarks/model/model_gpu_bench tests/island/island_nccl_test
          server/diloco-server worker/diloco-worker
          benchmarks/transport/diloco-bench-transport benchmarks/checksum/diloco-bench-checksum
          ctl/diloco-ctl)

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDILOCO_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
targets=()
for p in "${programs[@]}"; do targets+=("$(basename "$p")"); done
ninja -C "$build" "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/lib"
for p in "${programs[@]}"; do
  mkdir -p "$bundle/$(dirname "$p")"
  strip -o "$bundle/$p" "$build/$p"
done
module=()
if [[ -n ${DILOCO_GPU_PYTHON_HEADERS:-} ]]; then
  benchmarks/gpu/python_module.sh "$build" "$DILOCO_GPU_PYTHON_HEADERS" "$bundle/python"
  module=("$bundle"/python/diloco_ps/_diloco_ps.*.so)
fi
# What travels: every library the programs (and the module) load that the GPU machine has not
# of its own (glibc's family, the compiler runtime and CUDA's libraries stay:
# benchmarks/gpu/bundle_libs.sh).
built=()
for p in "${programs[@]}"; do built+=("$build/$p"); done
benchmarks/gpu/bundle_libs.sh "${built[@]}" "${module[@]}" | while read -r name path; do
  cp -L "$path" "$bundle/lib/$name"
done
# Check: run from the bundle, every library that travels resolves into the bundle.
bundled=()
for p in "${programs[@]}"; do bundled+=("$bundle/$p"); done
stray=$(LD_LIBRARY_PATH="$bundle/lib" benchmarks/gpu/bundle_libs.sh "${bundled[@]}" "${module[@]}" |
        awk -v lib="$bundle/lib/" 'index($2, lib) != 1')
if [[ -n $stray ]]; then
  echo "prepare: libraries not resolved from $bundle/lib:" >&2
  echo "$stray" >&2
  exit 1
fi
carry="build-gpu-carry"
rm -rf "$carry"
mkdir -p "$carry"
tar -czf "$carry/bundle.tgz" -C "$(dirname "$bundle")" "$(basename "$bundle")"
size=$(du -sm "$carry" | cut -f1)
echo "bundle $bundle: $(du -sm "$bundle" | cut -f1) MiB ($(find "$bundle/lib" -type f | wc -l)" \
  "libraries), packed into $carry/bundle.tgz: ${size} MiB of the 64 MiB the device tool carries"
if ((size > 60)); then
  echo "prepare: $carry over 60 MiB; the device tool carries 64 MiB in all" >&2
  exit 1
fi
