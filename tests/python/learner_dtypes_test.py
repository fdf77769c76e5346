#!/usr/bin/env python3
"""A bfloat16 (or float16) learner and a float32 learner of the same small model in one fleet:
the low-precision learner's final loss must be within 1% of the fp32 learner's.
--model=mlp (default): an MLP in bfloat16 and float32. --model=bigram: a next-token table in
float16 and float32, trained with SGD (tests/python/mlp_learner.py says why: what torch 1.13
can train in float16 on the CPU).

One shard on 127.0.0.1 serving the model's manifest (diloco_ps.write_manifest) with quorum 2
and a long grace cap, and two lockstep learners without streaming (tests/python/mlp_learner.py,
same seed, so the same initialisation and the same batches): every round of a fragment holds
both learners' pushes, whatever the timing, so the run does not depend on it. The fp32 learner
joins first (theta(0) is its initialisation; the other starts from it rounded), and
neither trains before both have joined. Each
trains 125 steps at H = 10 (12 rounds, then 5 local steps) and drains. Checked: every push
applied, none refused; both held-out losses (computed in fp32 from each learner's parameters)
at most 0.8 of theta(0)'s; the low-precision one within 1% of the fp32 one.

  /usr/bin/python3 learner_dtypes_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python \
      [--model=mlp|bigram]
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fleet import Shard, import_diloco_ps, kill_all, verdict  # noqa: E402
from mlp_learner import make_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    ap.add_argument("--model", choices=["mlp", "bigram"], default="mlp")
    a = ap.parse_args()
    low = "float16" if a.model == "bigram" else "bfloat16"
    ps = import_diloco_ps(a.python_dir)
    tmp = tempfile.mkdtemp(prefix="diloco-pydtypes.")
    ps.write_manifest(make_model(a.model), f"{tmp}/{a.model}.json")
    failures, procs = [], []
    with Shard(a.build, tmp, [f"--model=manifest:{tmp}/{a.model}.json", "--fragments=4",
                              "--quorum=2", "--grace_cap=60s"]) as shard:
        try:
            for worker_id, dtype in ((0, "float32"), (1, low)):
                log = f"{tmp}/{dtype}.log"
                procs.append((dtype, log, subprocess.Popen(
                    [sys.executable, f"{HERE}/mlp_learner.py", f"--python_dir={a.python_dir}",
                     f"--servers={shard.endpoint}", f"--worker_id={worker_id}",
                     f"--dtype={dtype}", f"--model={a.model}", f"--go_file={tmp}/go"],
                    stdout=open(log, "w"), stderr=subprocess.STDOUT)))
                end = time.time() + 60  # the next learner starts once this one has joined
                while "joined" not in open(log).read():
                    if procs[-1][2].poll() is not None or time.time() > end:
                        raise AssertionError(f"the {dtype} learner did not join:\n" +
                                             open(log).read())
                    time.sleep(0.05)
            open(f"{tmp}/go", "w").close()
            results = {}
            for dtype, log, p in procs:
                try:
                    rc = p.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    p.kill()
                    rc = "timeout"
                out = open(log).read()
                lines = [l for l in out.splitlines() if l.startswith("{")]
                if rc != 0 or not lines:
                    failures.append(f"{dtype} learner: exit {rc}\n{out[-3000:]}")
                    continue
                results[dtype] = r = json.loads(lines[-1])
                print(f"{dtype}: held-out loss {r['start_loss']:.4f} -> {r['final_loss']:.4f} "
                      f"(last training loss {r['train_loss']:.4f}); pushes {r['pushes']} "
                      f"applied {r['applied']} adoptions {r['adoptions']}; copies: "
                      f"{r['fetched_fragments']} fragments down, {r['stored_fragments']} up; "
                      f"{r['seconds']:.1f} s")
                if r["applied"] != r["pushes"] or r["pushes"] < 48 or r["refused"] != 0:
                    failures.append(f"{dtype}: pushes {r['pushes']} applied {r['applied']} "
                                    f"refused {r['refused']}")
                if r["final_loss"] > 0.8 * r["start_loss"]:
                    failures.append(f"{dtype}: the loss did not fall: {r['start_loss']:.4f} -> "
                                    f"{r['final_loss']:.4f}")
            if len(results) == 2:
                f32, lp = results["float32"]["final_loss"], results[low]["final_loss"]
                rel = abs(lp - f32) / f32
                print(f"{low} final loss {lp:.5f}, fp32 {f32:.5f}: {100 * rel:.3f}% apart")
                if rel > 0.01:
                    failures.append(f"{low} loss {lp:.5f} is {100 * rel:.2f}% from fp32's "
                                    f"{f32:.5f}")
        finally:
            kill_all(p for _, _, p in procs)
    return verdict(failures, tmp)


if __name__ == "__main__":
    sys.exit(main())
