#!/usr/bin/env bash
# Each binary's --version: exit 0 and one line "NAME VERSION (protocol P, commit C)", with
# VERSION the release CMake was given, P the kProtocolVersion of schema/wire.h (read here from
# the source, not from the binary) and C 12 hex digits or "unknown".
# Usage: version_test.sh VERSION WIRE_H BINARY...
set -euo pipefail
version=$1 wire_h=$2
shift 2
protocol=$(sed -n 's/^inline constexpr uint16_t kProtocolVersion = \([0-9]*\);.*/\1/p' "$wire_h")
[[ -n $protocol ]] || { echo "FAIL: no kProtocolVersion in $wire_h"; exit 1; }
for bin in "$@"; do
  name=$(basename "$bin")
  out=$(timeout 10 "$bin" --version) || { echo "FAIL: $name --version exited $?"; exit 1; }
  want="^${name//./\\.} ${version//./\\.} \(protocol $protocol, commit ([0-9a-f]{12}|unknown)\)$"
  if ! grep -qE "$want" <<<"$out" || [[ $(wc -l <<<"$out") -ne 1 ]]; then
    echo "FAIL: $name --version printed '$out', want /$want/"
    exit 1
  fi
  echo "ok: $out"
done
