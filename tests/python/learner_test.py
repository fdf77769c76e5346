#!/usr/bin/env python3
"""A PyTorch learner (diloco_ps, python/examples/gpt2_learner.py) and a C++ worker in one fleet.

One shard on 127.0.0.1 (a free port it picks, written to a file). A C++ worker joins first for
one step and leaves (it uploads theta(0) and logs its checksum, and pushes nothing); the
PyTorch learner then joins and must hold exactly that theta(0); once it has, it and a second
C++ worker train 300 steps each at H = 25 side by side. Both kinds of push must be applied, nothing
refused, and the global model in the shard's store (diloco-ctl eval after SIGTERM) must be far
below theta(0)'s loss on the same held-out tokens. Every process is bounded in time and stopped
by its PID.

  /usr/bin/python3 learner_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

try:
    import torch  # noqa: F401  (the learner needs it)
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import jsonl, kill_all, run_bounded, verdict, wait_for_file  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    a = ap.parse_args()
    server, worker = f"{a.build}/server/diloco-server", f"{a.build}/worker/diloco-worker"
    ctl = f"{a.build}/ctl/diloco-ctl"
    tmp = tempfile.mkdtemp(prefix="diloco-pylearner.")
    common = ["--model=tiny", "--fragments=4"]
    shard = subprocess.Popen([server, *common, "--shard=0", "--shards=1",
                              "--bind=tcp://127.0.0.1:*", f"--port_file={tmp}/port",
                              f"--store={tmp}/store", "--grace_cap=1s", "--worker_timeout=2s",
                              "--durability=per-round", "--progress_interval=1000s"],
                             stdout=open(f"{tmp}/shard.log", "w"), stderr=subprocess.STDOUT)
    failures = []
    try:
        endpoint = wait_for_file(f"{tmp}/port", 20)
        cpp = [worker, *common, f"--servers={endpoint}", "--threads=1", "--lr=3e-3",
               "--num_workers=2", "--log_sync_events"]
        # theta(0): uploaded by a C++ worker that leaves after one step, pushing nothing.
        rc = run_bounded(cpp + ["--worker_id=0", "--steps=1", "--inner_steps=1000",
                        f"--metrics_jsonl={tmp}/first.jsonl"], f"{tmp}/first.log", 60)
        assert rc == 0, open(f"{tmp}/first.log").read()
        theta0 = [e for e in jsonl(f"{tmp}/first.jsonl") if e["event"] == "joined"][0]
        start_loss = float(re.search(r"held-out loss ([0-9.]+)",
                                     open(f"{tmp}/first.log").read()).group(1))

        env = dict(os.environ, PYTHONPATH=a.python_dir)
        py = subprocess.Popen([sys.executable, f"{ROOT}/python/examples/gpt2_learner.py",
                               f"--servers={endpoint}", "--worker_id=1", "--num_workers=2",
                               "--model=tiny", "--fragments=4", "--steps=300",
                               "--inner_steps=25", f"--ctl={ctl}", "--progress=100"],
                              stdout=open(f"{tmp}/py.log", "w"), stderr=subprocess.STDOUT,
                              env=env)
        end = time.time() + 120  # the second C++ worker starts once the learner has joined
        while "joined" not in open(f"{tmp}/py.log").read():
            if py.poll() is not None or time.time() > end:
                raise AssertionError("the PyTorch learner did not join:\n" +
                                     open(f"{tmp}/py.log").read())
            time.sleep(0.05)
        rc = run_bounded(cpp + ["--worker_id=0", "--steps=300", "--inner_steps=25",
                        f"--metrics_jsonl={tmp}/cpp.jsonl"], f"{tmp}/cpp.log", 180)
        try:
            py_rc = py.wait(timeout=180)
        except subprocess.TimeoutExpired:
            py.kill()
            py_rc = "timeout"
        py_log = open(f"{tmp}/py.log").read()
        if rc != 0 or py_rc != 0:
            failures.append(f"exit: C++ {rc}, PyTorch {py_rc}\n{py_log[-3000:]}")
        else:
            done = json.loads([l for l in py_log.splitlines() if l.startswith("{")][-1])
            if done["joined_checksum"] != theta0["params_checksum"]:
                failures.append(f"theta(0) differs: PyTorch {done['joined_checksum']}, "
                                f"C++ {theta0['params_checksum']}")
            if done["pushes"] < 4 or done["applied"] < 4 or done["refused"] != 0:
                failures.append(f"PyTorch learner pushes {done['pushes']} applied "
                                f"{done['applied']} refused {done['refused']}")
            cpp_events = [e["event"] for e in jsonl(f"{tmp}/cpp.jsonl")]
            if cpp_events.count("applied") < 4 or "refused" in cpp_events:
                failures.append(f"C++ worker: {cpp_events.count('applied')} applied, "
                                f"refused: {'refused' in cpp_events}")
        # A model the shard does not serve: the join raises with the shard's reason.
        sys.path.insert(0, a.python_dir)
        import diloco_ps
        wrong = diloco_ps.Learner(servers=endpoint, worker_id=9, fragments=4,
                                  params=torch.nn.Linear(4, 4).named_parameters())
        try:
            wrong.join(timeout=30)
            failures.append("a learner with another model joined")
        except RuntimeError as e:
            if "refuses" not in str(e) or "Wrong" not in str(e):
                failures.append(f"refusal without the shard's reason: {e}")
        try:
            diloco_ps.Learner(servers=endpoint, worker_id=9, codec="int9",
                              params=torch.nn.Linear(4, 4).named_parameters())
            failures.append("codec int9 accepted")
        except ValueError as e:
            if "int9" not in str(e):
                failures.append(f"bad codec error does not name it: {e}")
        shard.send_signal(signal.SIGTERM)
        shard.wait(timeout=30)
        out = subprocess.run([ctl, "eval", *common, "--shards=1", "--data=synthetic",
                              f"{tmp}/store"], capture_output=True, text=True, timeout=120)
        m = re.search(r"loss ([0-9.]+) over (\d+) tokens", out.stdout + out.stderr)
        if not m:
            failures.append(f"no loss from diloco-ctl eval: {out.stdout}{out.stderr}")
        elif float(m.group(1)) > 0.75 * start_loss:
            failures.append(f"global model {m.group(1)} against theta(0) {start_loss}")
        else:
            print(f"theta(0) {start_loss:.4f} -> global model {float(m.group(1)):.4f} over "
                  f"{m.group(2)} tokens; theta(0) checksum {theta0['params_checksum']} on both")
    finally:
        kill_all([shard])
    return verdict(failures, tmp)


if __name__ == "__main__":
    sys.exit(main())
