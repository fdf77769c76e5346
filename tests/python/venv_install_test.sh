#!/usr/bin/env bash
# diloco_ps as users install it: a fresh virtual environment that sees Debian's packages
# (python3 -m venv --system-site-packages --without-pip: torch, numpy and pip from python3-torch,
# python3-numpy, python3-pip), `pip install --no-build-isolation --no-index ./python` into it
# (offline: setup.py runs CMake on the repository root), then, from a folder outside the
# repository, that environment's Python must
#   - import the installed diloco_ps (not the source tree's or a build folder's), whose
#     __version__ and package metadata are the root CMakeLists.txt's project VERSION;
#   - refuse `import diloco_ps` without torch with an ImportError that says how to get it;
#   - run a learner against a diloco-server on 127.0.0.1 (a free port the shard picks; stopped
#     by its PID; every step bounded in time): a tiny PyTorch model whose manifest the package
#     writes, joins, trains a few steps and has its pushes applied, none refused.
# The pip build's CMake folder is BUILD_DIR/venv_install/cmake and is kept: a later run compiles
# only what changed (the first compiles the module's dependencies once).
#
# Usage: tests/python/venv_install_test.sh BUILD_DIR   (a build with diloco-server)
# Environment: PYTHON, the interpreter the venv is made from (default /usr/bin/python3);
# CMAKE_BUILD_PARALLEL_LEVEL, the pip build's compile jobs (default 2).
# Exit status 0 pass, 1 fail, 77 skip (no torch for PYTHON).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: venv_install_test.sh BUILD_DIR}" && pwd)
python=${PYTHON:-/usr/bin/python3}
server=$build/server/diloco-server
[[ -x $server ]] || { echo "FAIL: no $server (build diloco-server first)"; exit 1; }
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIP: torch is not installed for $python"
  exit 77
fi
version=$(sed -n 's/^project(diloco_ps VERSION \([0-9.]*\) .*/\1/p' "$root/CMakeLists.txt")
[[ -n $version ]] || { echo "FAIL: no project VERSION in $root/CMakeLists.txt"; exit 1; }

tmp=$(mktemp -d /tmp/diloco-venv.XXXXXX)
shard_pid=
cleanup() {
  if [[ -n $shard_pid ]] && kill -0 "$shard_pid" 2>/dev/null; then
    kill -TERM "$shard_pid"
    timeout 20 tail --pid="$shard_pid" -f /dev/null || kill -KILL "$shard_pid"
    wait "$shard_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "logs in $tmp"
  exit 1
}

start=$SECONDS
venv=$tmp/venv
"$python" -m venv --system-site-packages --without-pip "$venv" || fail "python3 -m venv"
(cd "$root" && DILOCO_CMAKE_BUILD_DIR=$build/venv_install/cmake \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  timeout 900 "$venv/bin/python" -m pip install --no-build-isolation --no-index ./python) \
  >"$tmp/pip.log" 2>&1 || { tail -40 "$tmp/pip.log"; fail "pip install ./python"; }
echo "pip install ./python: $((SECONDS - start)) s"

cd "$tmp"  # outside the repository: only the installed package can be imported
if "$venv/bin/python" -c "import sys; sys.modules['torch'] = None; import diloco_ps" \
  >"$tmp/notorch.log" 2>&1; then
  fail "import diloco_ps without torch succeeded"
fi
grep -q "ImportError: diloco_ps needs PyTorch.*python3-torch" "$tmp/notorch.log" ||
  fail "import diloco_ps without torch: $(tail -1 "$tmp/notorch.log")"

cat >"$tmp/learner.py" <<'PY'
import importlib.metadata
import sys

import torch

import diloco_ps

venv, version, manifest, endpoint = sys.argv[1:5]
assert diloco_ps.__file__.startswith(venv + "/"), f"imported {diloco_ps.__file__}"
assert diloco_ps.__version__ == version, f"__version__ {diloco_ps.__version__}, want {version}"
meta = importlib.metadata.version("diloco_ps")
assert meta == version, f"installed metadata says {meta}, want {version}"

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
named = list(model.named_parameters())
if not endpoint:
    diloco_ps.write_manifest(named, manifest)
    sys.exit(0)
learner = diloco_ps.Learner(servers=endpoint, worker_id=1, params=named, fragments=2,
                            inner_steps=2, lockstep=True)
learner.join(timeout=30)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 16)
y = x[:, :1] * 2.0
for _ in range(8):
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    learner.after_step(tokens=64)
learner.drain(timeout=20)
st = learner.stats
assert st["pushes"] >= 4 and st["applied"] == st["pushes"] and st["refused"] == 0, st
print(f"diloco_ps {diloco_ps.__version__} from {diloco_ps.__file__}: pushes {st['pushes']}, "
      f"applied {st['applied']}, refused {st['refused']}")
PY
learner() {  # endpoint ("": write the manifest only)
  local rc=0
  timeout 120 "$venv/bin/python" "$tmp/learner.py" "$venv" "$version" "$tmp/model.json" "$1" \
    >>"$tmp/learner.log" 2>&1 || rc=$?
  ((rc == 0)) || { tail -20 "$tmp/learner.log"; fail "the learner exited $rc"; }
}
learner ""
"$server" --shard=0 --shards=1 --fragments=2 --model="manifest:$tmp/model.json" \
  --bind="tcp://127.0.0.1:*" --port_file="$tmp/port" --store="$tmp/store" --grace_cap=500ms \
  --worker_timeout=5s --progress_interval=1000s >"$tmp/shard.log" 2>&1 &
shard_pid=$!
for _ in $(seq 200); do
  [[ -s $tmp/port ]] && break
  kill -0 "$shard_pid" 2>/dev/null || fail "the shard exited: $(tail -3 "$tmp/shard.log")"
  sleep 0.1
done
[[ -s $tmp/port ]] || fail "the shard wrote no port in 20 s"
learner "$(cat "$tmp/port")"
cleanup
tail -1 "$tmp/learner.log"
echo "PASS ($((SECONDS - start)) s)"
rm -rf "$tmp"
