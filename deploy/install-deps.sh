#!/usr/bin/env bash
# Installs the Debian packages this project builds, tests and runs with. Idempotent: packages
# already present are skipped, so the README commands and CI can call it every time.
# Usage: deploy/install-deps.sh [--with-python-tests]   (the Python the tests run: PyTorch for the
# safetensors and Hugging Face export checks, the PyTorch learner (python/, diloco_ps) and the
# second protocol client's reference, ZeroMQ, FlatBuffers and xxhash for that client,
# tests/protocol/), and gdb, whose
# stacks of a process the convergence study finds hung go into the test log
# (benchmarks/quality/procs.sh); Slurm and munge for the fleet check across namespace hosts
# (deploy/hosts/check-fleet.sh); tmux, in which tests/integration/top_test.cc runs diloco-ctl top
# live. python3-dev and pybind11-dev build the diloco_ps module itself; python3-pip and
# python3-setuptools install it (pip install --no-build-isolation ./python); matplotlib draws
# the main job's report (deploy/run_report.py) and the benchmarks' plots.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libzmq3-dev cppzmq-dev libsodium-dev
  libflatbuffers-dev flatbuffers-compiler
  libabsl-dev librocksdb-dev libgloo-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev libcpp-httplib-dev libopenblas-dev nlohmann-json3-dev
  clang libclang-rt-dev iproute2 procps python3
  python3-dev pybind11-dev python3-pip python3-setuptools python3-matplotlib
)
if [[ "${1:-}" == "--with-python-tests" ]]; then
  pkgs+=(python3-torch python3-numpy python3-zmq python3-flatbuffers python3-xxhash python3-venv
         gdb slurm-wlm munge tmux)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
