#!/usr/bin/env bash
# Runs ON the GPU machine (one short device command): packs what building diloco_ps for that
# machine's python3 needs and this machine lacks, its Python headers and pybind11's, into
# OUT/python_headers.tgz (half a MiB):
#   device run:  benchmarks/gpu/python_headers.sh $OUT
#   here:        DILOCO_GPU_PYTHON_HEADERS=<files_at>/python_headers.tgz benchmarks/gpu/prepare.sh
# prepare.sh then builds the module for that Python into the bundle (python_module.sh), which the
# learner part (learner_check.sh) imports.
set -euo pipefail
out=${1:?usage: python_headers.sh OUT}
read -r include pybind < <(python3 -c '
import sysconfig, pybind11
print(sysconfig.get_paths()["include"], pybind11.get_include())')
dirs=("${include#/}" "${pybind#/}")
# pyconfig.h: Debian and Ubuntu keep it in a multiarch folder that Python.h's folder includes.
multiarch=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("MULTIARCH") or "")')
if [[ -n $multiarch && -d /usr/include/$multiarch/$(basename "$include") ]]; then
  dirs+=("usr/include/$multiarch/$(basename "$include")")
fi
tar -czf "$out/python_headers.tgz" -C / "${dirs[@]}"
echo "python_headers: $(python3 -V), pybind11 at $pybind: $out/python_headers.tgz"
