#!/usr/bin/env bash
# The transport benchmarks on the GPU machine's 16 cores, where the receiving thread has a core
# of its own (on the 2-vCPU development machine it shares two cores with both ZeroMQ I/O
# threads; benchmarks/transport/RESULTS.md). Three runs of diloco-bench-transport without
# CURVE (the target there: push >= 90% of raw ZeroMQ from 4 MiB) and one of
# diloco-bench-checksum (the receiver's read against the memory's). Logs under OUT.
# Usage: benchmarks/gpu/transport_check.sh BUNDLE OUT   (BUNDLE: see prepare.sh)
# DILOCO_REHEARSAL=1 (benchmarks/gpu/rehearse.sh): one short run of each, to show that the
# programs start from the bundle and measure; no figure of it counts.
set -u
bundle=${1:?usage: transport_check.sh BUNDLE OUT}
out=${2:?usage: transport_check.sh BUNDLE OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
nproc >"$out/nproc.txt"
runs=3 sizes=4,16,64,256 reps=2 mib=512
[[ ${DILOCO_REHEARSAL:-0} == 1 ]] && runs=1 sizes=4 reps=1 mib=16
status=0
for i in $(seq "$runs"); do
  "$bundle/benchmarks/transport/diloco-bench-transport" --reps=$reps --curve=false \
    --sizes_mib=$sizes >"$out/transport_$i.log" 2>&1 || status=1
  cat "$out/transport_$i.log"
done
"$bundle/benchmarks/checksum/diloco-bench-checksum" --reps=$reps --bytes_mib=$mib --pool_mib=$mib \
  >"$out/checksum.log" 2>&1 || status=1
cat "$out/checksum.log"
exit $status
