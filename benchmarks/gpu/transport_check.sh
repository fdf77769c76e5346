#!/usr/bin/env bash
# The transport benchmarks on the GPU machine's 16 cores, where the receiving thread has a core
# of its own (on the 2-vCPU development machine it shares two cores with both ZeroMQ I/O
# threads; benchmarks/RESULTS.md, "Transport"). Three runs of diloco-bench-transport without
# CURVE (the target there: push >= 90% of raw ZeroMQ from 4 MiB) and one of
# diloco-bench-checksum (the receiver's read against the memory's). Logs under OUT.
# Usage: benchmarks/gpu/transport_check.sh BUNDLE OUT   (BUNDLE: see prepare.sh)
set -u
bundle=${1:?usage: transport_check.sh BUNDLE OUT}
out=${2:?usage: transport_check.sh BUNDLE OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
nproc >"$out/nproc.txt"
status=0
for i in 1 2 3; do
  "$bundle/benchmarks/transport/diloco-bench-transport" --reps=2 --curve=false \
    --sizes_mib=4,16,64,256 >"$out/transport_$i.log" 2>&1 || status=1
  cat "$out/transport_$i.log"
done
"$bundle/benchmarks/checksum/diloco-bench-checksum" --reps=2 --bytes_mib=512 --pool_mib=512 \
  >"$out/checksum.log" 2>&1 || status=1
cat "$out/checksum.log"
exit $status
