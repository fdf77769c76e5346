#!/usr/bin/env bash
# Rejoin time at 1B parameters, on the GPU machine's memory (128 GiB; the development machine's
# 23 GiB hold a 1.01B row with one fp32 learner, not a 1.26B learner beside two shards:
# benchmarks/fleet/RESULTS.md, "Rejoin time").
# No GPU is used: benchmarks/fleet/rejoin.py with the bundle's programs (the bundle mirrors the
# build tree), first at GPT-2 124M (the row measured on the development machine, as the peer on
# this machine), then at 1.26B (24 layers of width 2048, context 1024, GPT-2's vocabulary).
# Logs and the JSON of each under OUT; the machine's memory in OUT/memory.txt.
# Usage: benchmarks/gpu/rejoin_check.sh BUNDLE OUT
# DILOCO_REHEARSAL=1 (benchmarks/gpu/rehearse.sh): the "tiny" model only, to show that the
# programs start from the bundle and rejoin; no figure of it counts.
set -u
bundle=${1:?usage: rejoin_check.sh BUNDLE OUT}
out=${2:?usage: rejoin_check.sh BUNDLE OUT}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
free -g >"$out/memory.txt" 2>&1
models=(gpt2-124m 'L=24,C=2048,T=1024,V=50257')
[[ ${DILOCO_REHEARSAL:-0} == 1 ]] && models=(tiny)
status=0
for m in "${models[@]}"; do
  name=${m//[=,]/_}
  python3 "$here/benchmarks/fleet/rejoin.py" --build="$bundle" --model="$m" --step_time=100ms \
    --inner_steps=20 --out="$out/rejoin_$name.json" >"$out/rejoin_$name.log" 2>&1 ||
    { echo "rejoin: $m failed"; status=1; }
  cat "$out/rejoin_$name.log"
done
exit $status
