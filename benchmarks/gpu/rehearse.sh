#!/usr/bin/env bash
# The GPU run's rehearsal, on a machine without a GPU: what the GPU machine will run, run here
# first, so that the minutes of a lent GPU go to measuring, not finding that a program
# does not start. It
#   1. builds and packs the bundle exactly as for the GPU machine (prepare.sh), which checks that
#      every library that travels resolves from the bundle and that the pack fits the 64 MiB the
#      device tool carries;
#   2. checks the bundle's lib/ by the package manager's list: nothing of glibc's family
#      (libc6) nor of the compiler runtime (libgcc-s1, libstdc++6) travels;
#   3. unpacks the pack in a fresh folder and runs the driver (run.sh) on it one part per call,
#      in the GPU run's order, inside a private mount namespace where the CUDA toolkit's folder
#      is an empty tmpfs (where the machine allows one): every GPU part must end with the
#      verdict "no GPU" once its programs have started and said so (no_gpu_check.sh), the parts
#      that need no GPU (transport, rejoin) must pass in their short form, and each within its
#      limit.
# Usage: benchmarks/gpu/rehearse.sh [BUILD]   (BUILD: a CUDA build folder; default build-gpu)
# deploy/test.sh runs it on its own build when that build has the CUDA paths.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
fail() { echo "rehearse: $*" >&2; exit 1; }
work=$(mktemp -d /tmp/diloco-rehearsal.XXXXXX)
trap 'rm -rf "$work"' EXIT

DILOCO_GPU_BUILD=$build benchmarks/gpu/prepare.sh "$work/bundle"

benchmarks/gpu/bundle_libs_test.sh --dir="$work/bundle/lib" ||
  fail "the bundle's lib/ fails bundle_libs_test.sh"

mkdir -p "$work/machine"
cp build-gpu-carry/bundle.tgz "$work/machine/"
toolkit=$(readlink -f "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/..")
[[ -d $toolkit ]] || fail "no CUDA toolkit folder to hide ($toolkit)"
# Where no private mount namespace can be made (a container without the capability), the toolkit
# stays visible and the rehearsal says so: prepare.sh's check and cuda_free_start_test show that
# no program loads a CUDA library at start.
hide=(unshare -rm bash -c 'mount -t tmpfs none "$1" && shift && exec "$@"' _ "$toolkit")
if ! why=$(unshare -rm true 2>&1); then
  echo "rehearse: cannot hide $toolkit (unshare -rm: $why); it stays visible"
  hide=()
fi
declare -A limit=([kernels]=150 [model]=240 [cluster]=90 [island]=60 [learner]=180
                  [transport]=45 [rejoin]=60)
for part in kernels model cluster island learner transport rejoin; do
  start=$SECONDS
  set +e
  "${hide[@]}" env DILOCO_REHEARSAL=1 benchmarks/gpu/run.sh "$work/machine/bundle.tgz" "$work/out" "$part" \
    >"$work/$part.log" 2>&1
  rc=$?
  set -e
  took=$((SECONDS - start))
  verdict=$(grep "^$part: " "$work/out/summary.txt" | tail -n 1 || true)
  echo "rehearse: $part: exit $rc in $took s: ${verdict:-no verdict}"
  want=3 pattern="^$part: no GPU \\("
  # Parts that need no GPU run their short form here and must pass.
  [[ $part == transport || $part == rejoin ]] && want=0 pattern="^$part: exit 0 "
  if ((rc != want)) || ! grep -qE "$pattern" <<<"$verdict" || ((took > limit[$part])); then
    tail -n 20 "$work/$part.log" >&2
    fail "$part: expected exit $want and /$pattern/ within ${limit[$part]} s"
  fi
done
echo "rehearse: every part ended with its verdict; the bundle starts without CUDA's libraries"
