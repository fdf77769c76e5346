#!/usr/bin/env bash
# A CUDA-built program starts, and the worker trains on the CPU, on a machine with no CUDA
# library at all; asked for a GPU there, the worker stops at once saying why.
#   1. No program loads a CUDA library when it starts: ldd lists none of libcuda, libcudart,
#      libcublas, libcublasLt, libnccl (the runtime is linked statically; cuBLAS and NCCL are
#      dlopen'ed when a GPU trainer needs them: worker/model/cuda/library_search.h).
#   2. With the CUDA toolkit's folder hidden (an empty tmpfs over it in a private mount
#      namespace, `unshare -rm`, where the machine allows one): the server, the worker and diloco-ctl start (--version), the
#      worker trains the tiny model for 20 steps with --device=cpu, and --device=cuda fails
#      with the CUDA runtime's reason.
# Usage: cuda_free_start_test.sh CUDA_TOOLKIT_DIR SERVER WORKER CTL [PROGRAM...]
set -euo pipefail
toolkit=$1 server=$2 worker=$3 ctl=$4
shift 4
fail() { echo "cuda_free_start_test: $*" >&2; exit 1; }

for p in "$server" "$worker" "$ctl" "$@"; do
  cuda=$(ldd "$p" | grep -E '\blib(cuda|cudart|cublas|cublasLt|nccl)\.so' || true)
  [[ -z $cuda ]] || fail "$(basename "$p") loads CUDA libraries at start: $cuda"
done
echo "1. no CUDA library in the start-up of $(($# + 3)) programs"

# The toolkit's real folder (/usr/local/cuda is often a link to /usr/local/cuda-13.x).
# Where no private mount namespace can be made (a container without the capability), the toolkit
# stays visible and the run says so: step 1 has shown that nothing loads from it at start.
toolkit=$(readlink -f "$toolkit")
out=$(mktemp -d /tmp/diloco-cudafree.XXXXXX)
trap 'rm -rf "$out"' EXIT
hide=(unshare -rm) hidden="with $toolkit hidden"
if ! why=$(unshare -rm true 2>&1); then
  hide=() hidden="with $toolkit visible (cannot hide it: unshare -rm: $why)"
  echo "cuda_free_start_test: $hidden"
fi
"${hide[@]}" bash -s -- "$toolkit" "$server" "$worker" "$ctl" "$out" "${#hide[@]}" <<'SH'
set -euo pipefail
toolkit=$1 server=$2 worker=$3 ctl=$4 out=$5 hide=$6
if ((hide)); then
  mount -t tmpfs none "$toolkit"
  [[ -z $(ls -A "$toolkit") ]] || { echo "the toolkit folder is not hidden" >&2; exit 1; }
fi
for p in "$server" "$worker" "$ctl"; do
  timeout 30 "$p" --version >/dev/null || { echo "$(basename "$p") did not start" >&2; exit 1; }
done
timeout 120 "$worker" --device=cpu --model=tiny --steps=20 --metrics_jsonl="$out/cpu.jsonl" \
  >"$out/cpu.log" 2>&1 || { cat "$out/cpu.log" >&2; echo "--device=cpu failed" >&2; exit 1; }
grep -q '"event":"done"' "$out/cpu.jsonl" || { echo "no done event" >&2; exit 1; }
grep -q '"steps":20' "$out/cpu.jsonl" || { echo "did not train 20 steps" >&2; exit 1; }
if timeout 60 "$worker" --device=cuda --model=tiny --steps=1 >"$out/cuda.log" 2>&1; then
  echo "--device=cuda succeeded without a CUDA driver" >&2; exit 1
fi
grep -q 'CUDA GPUs usable on this machine (CUDA: ' "$out/cuda.log" ||
  { cat "$out/cuda.log" >&2; echo "--device=cuda failed without its reason" >&2; exit 1; }
SH
echo "2. $hidden: server, worker and diloco-ctl start, the worker trains on the CPU;" \
  "--device=cuda: $(tail -n 1 "$out/cuda.log")"
