#!/usr/bin/env bash
# The GPU bundle carries nothing of glibc's family nor of the compiler runtime: every library
# benchmarks/gpu/bundle_libs.sh lets travel for PROGRAMs is checked against the files Debian's
# own packages of glibc (libc6) and of the compiler runtime (libgcc-s1, libstdc++6) install, by
# the package manager's list, not by the script's pattern. Also checks that the list is not empty
# (ldd worked) and that libzmq, which must travel, does. Exit 77 (skip) without dpkg.
# With --dir=LIB, the files of a packed bundle's lib/ folder are checked instead (rehearse.sh).
# Usage: benchmarks/gpu/bundle_libs_test.sh PROGRAM...  |  bundle_libs_test.sh --dir=LIB
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v dpkg-query >/dev/null || { echo "no dpkg: skipped"; exit 77; }
owned=$(dpkg-query -L libc6 libgcc-s1 libstdc++6 2>/dev/null | grep -E '\.so(\.|$)' |
        xargs -r -n1 basename | sort -u)
[[ -n $owned ]] || { echo "bundle_libs_test: dpkg lists no library of libc6" >&2; exit 1; }
if [[ ${1:-} == --dir=* ]]; then
  travel=$(find "${1#--dir=}" -type f -printf '%f %p\n' | sort)
else
  travel=$("$here/bundle_libs.sh" "$@")
fi
[[ -n $travel ]] || { echo "bundle_libs_test: nothing travels: did ldd fail?" >&2; exit 1; }
bad=$(awk '{print $1}' <<<"$travel" | grep -Fxf <(echo "$owned") || true)
if [[ -n $bad ]]; then
  echo "bundle_libs_test: these would travel but belong to glibc or the compiler runtime:" >&2
  echo "$bad" >&2
  exit 1
fi
grep -q '^libzmq\.' <<<"$travel" || { echo "bundle_libs_test: libzmq does not travel" >&2; exit 1; }
echo "bundle_libs_test: $(wc -l <<<"$travel") libraries travel, none of glibc's or the compiler's"
