#!/usr/bin/env bash
# Builds diloco_ps for another machine's Python (the GPU machine's) from a build folder of this
# one: the module's own compile and link commands (ninja's, so every flag stays the project's)
# with that Python's headers and pybind11's in place of this machine's, into DEST/diloco_ps
# beside the package's Python files.
# Usage: benchmarks/gpu/python_module.sh BUILD HEADERS_TGZ DEST
# HEADERS_TGZ comes from python_headers.sh, run on that machine. The module links the project's
# libraries statically and loads libzmq and Abseil's from the bundle's lib/, like the programs.
set -euo pipefail
build=$(cd "${1:?usage: python_module.sh BUILD HEADERS_TGZ DEST}" && pwd)
headers=$(readlink -f "${2:?usage: python_module.sh BUILD HEADERS_TGZ DEST}")
dest=${3:?usage: python_module.sh BUILD HEADERS_TGZ DEST}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/diloco-pymodule.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -xzf "$headers" -C "$work"
python_h=$(find "$work" -name Python.h -path '*/python3.*' | head -n 1)
pybind_h=$(find "$work" -name pybind11.h -path '*/pybind11/pybind11.h' | head -n 1)
if [[ -z $python_h || -z $pybind_h ]]; then
  echo "python_module: $headers lacks Python.h or pybind11" >&2
  exit 1
fi
pyinc=$(dirname "$python_h")
pybind=$(dirname "$(dirname "$pybind_h")")
major=$(awk '/#define PY_MAJOR_VERSION/ {print $3}' "$pyinc/patchlevel.h")
minor=$(awk '/#define PY_MINOR_VERSION/ {print $3}' "$pyinc/patchlevel.h")
suffix=.cpython-$major$minor-x86_64-linux-gnu.so
# Debian's and Ubuntu's pyconfig.h includes <MULTIARCH/python3.X/pyconfig.h> from the root of
# the include tree.
extra=()
[[ -d $work/usr/include ]] && extra+=(-isystem "$work/usr/include")

library=$(ninja -C "$build" -t targets all |
  awk -F: '/^python\/diloco_ps\/_diloco_ps\..*\.so:/ {print $1}')
[[ -n $library ]] || { echo "python_module: $build does not build diloco_ps" >&2; exit 1; }
ninja -C "$build" "$library" >/dev/null
link=$(ninja -C "$build" -t commands "$library" | tail -n 1)
objects=$(grep -o -- 'python/CMakeFiles/_diloco_ps\.dir/[^ ]*\.o' <<<"$link" | sort -u)
[[ -n $objects ]] || { echo "python_module: no object of the module in its link" >&2; exit 1; }
for object in $objects; do
  compile=$(ninja -C "$build" -t commands "$object" | tail -n 1)
  # This machine's Python include folder, as CMake put it on the command line.
  ours=$(grep -o -- '-isystem [^ ]*python3\.[0-9]*' <<<"$compile" | head -n 1)
  if [[ -z $ours ]]; then
    echo "python_module: no Python include folder in $object's command" >&2
    exit 1
  fi
  compile=${compile/"$ours"/-isystem $pybind -isystem $pyinc ${extra[*]}}
  mine=$work/$(basename "$object")
  compile=${compile//"$object"/$mine}
  link=${link//"$object"/$mine}
  (cd "$build" && eval "$compile")
done
link=${link//"$build/$library"/$library}  # the strip step names it by its whole path
link=${link//"$library"/$work/_diloco_ps$suffix}
(cd "$build" && eval "$link")
mkdir -p "$dest/diloco_ps"
cp "$work/_diloco_ps$suffix" "$dest/diloco_ps/"
cp "$here"/python/diloco_ps/*.py "$build/python/diloco_ps/_version.py" "$dest/diloco_ps/"
echo "python_module: diloco_ps for Python $major.$minor (its headers and pybind11's from" \
  "$headers) in $dest/diloco_ps"
