#!/bin/bash
# An --insecure shard bound to every address, inside a private network namespace (unshare -rn:
# only its own loopback exists, so nothing outside can reach what it serves). It must say so
# loudly on stderr, report "insecure": true in Stats and diloco_insecure 1 on /metrics; the same
# shard without --insecure must refuse to start (exit 2). A bare --metrics_address=PORT listens on
# 127.0.0.1 only.
#   insecure_namespace_test.sh DILOCO_SERVER DILOCO_CTL
# Exit 0 pass, 1 fail, 77 skip (no unprivileged network namespaces here).
set -u
server=$1 ctl=$2
if ! unshare -rn true 2>/dev/null; then
  echo "SKIP: unshare -rn is not permitted here"
  exit 77
fi
tmp=$(mktemp -d /tmp/diloco-insecure.XXXXXX)
# The part that runs inside the namespace; its exit status is the test's.
cat > "$tmp/inside.sh" <<'INSIDE'
set -u
server=$1 ctl=$2 tmp=$3
fail=0
check() {  # check WHAT COMMAND...: runs COMMAND, counts a failure with WHAT
  local what=$1
  shift
  if ! "$@"; then
    echo "FAILED: $what"
    fail=1
  fi
}
ip link set lo up || exit 1
plan=(--fragments=4 --model=tiny --progress_interval=1000s)

timeout 20 "$server" "${plan[@]}" --bind='tcp://0.0.0.0:*' --port_file="$tmp/refused.port" \
  >"$tmp/refused.log" 2>&1
rc=$?
check "without --insecure: exit 2, got $rc" test "$rc" = 2
check "the refusal names the address" grep -q -- "--bind=tcp://0.0.0.0:\*: not a loopback" \
  "$tmp/refused.log"

timeout 60 "$server" "${plan[@]}" --bind='tcp://0.0.0.0:*' --port_file="$tmp/port" \
  --metrics_address=0.0.0.0:0 --insecure >"$tmp/shard.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.1; done
check "the --insecure shard started" test -s "$tmp/port"
port=$(sed -n 's|^tcp://0.0.0.0:\([0-9]*\)$|\1|p' "$tmp/port")
check "it listens on 0.0.0.0 ($(cat "$tmp/port"))" test -n "$port"
warning="WARNING: --insecure: --bind=tcp://0.0.0.0:\* and --metrics_address=0.0.0.0:0 served"
check "the warning" grep -q "$warning WITHOUT CURVE" "$tmp/shard.log"
check "the start line" grep -q "NO CURVE (--insecure)" "$tmp/shard.log"
timeout 20 "$ctl" stats --server="tcp://127.0.0.1:$port" >"$tmp/stats.json" 2>&1
check "Stats says insecure" grep -q '"insecure":true' "$tmp/stats.json"
mport=$(sed -n 's|.*Prometheus metrics on 0.0.0.0:0, port \([0-9]*\) (plaintext.*|\1|p' \
  "$tmp/shard.log")
check "the metrics line names the exposure" test -n "$mport"
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt" 2>/dev/null &&
    grep -q '^diloco_insecure' "$tmp/metrics.txt" && break
  sleep 0.1
done
check "the diloco_insecure gauge is 1" grep -q '^diloco_insecure{shard="0"} 1$' "$tmp/metrics.txt"
kill -TERM "$pid"
wait "$pid"

# A bare metrics port: 127.0.0.1 only, and the shard is not insecure.
timeout 60 "$server" "${plan[@]}" --bind='tcp://127.0.0.1:*' --port_file="$tmp/port2" \
  --metrics_address=0 >"$tmp/shard2.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$tmp/port2" ] && break; sleep 0.1; done
mport=$(sed -n 's|.*Prometheus metrics on 127.0.0.1:0, port \([0-9]*\)$|\1|p' "$tmp/shard2.log")
check "a bare metrics port is 127.0.0.1's" test -n "$mport"
check "listening on 127.0.0.1:$mport only" sh -c \
  "ss -ltnH | awk '{print \$4}' | grep -qx '127.0.0.1:$mport'"
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$mport/metrics" >"$tmp/metrics2.txt" 2>/dev/null &&
    grep -q '^diloco_insecure' "$tmp/metrics2.txt" && break
  sleep 0.1
done
check "the diloco_insecure gauge is 0" grep -q '^diloco_insecure{shard="0"} 0$' "$tmp/metrics2.txt"
kill -TERM "$pid"
wait "$pid"
exit $fail
INSIDE
unshare -rn bash "$tmp/inside.sh" "$server" "$ctl" "$tmp"
rc=$?
if [ $rc = 0 ]; then
  rm -rf "$tmp"
  echo PASS
else
  echo "FAIL: logs in $tmp"
  rc=1
fi
exit $rc
