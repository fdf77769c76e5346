#!/usr/bin/env python3
"""phases.py on hand-made worker logs: two workers, worker 1 always pushing 10 steps (100 ms)
after worker 0, each round applied when worker 1's push arrives. Also: logs without sync
events are refused, naming the flag."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write_logs(d, with_events=True):
    for w in (0, 1):
        with open(os.path.join(d, f"worker{w}.jsonl"), "w") as f:
            f.write(json.dumps({"event": "progress", "worker": w, "step_time_us": 10000.0,
                                "wall_time": 100.0}) + "\n")
            if not with_events:
                continue
            for r in range(3):  # rounds applied as versions 2, 3, 4 of fragment 0
                t0 = 100.0 + r
                left = t0 + 0.1 * w
                f.write(json.dumps({"event": "push", "worker": w, "fragment": 0, "seq": r + 1,
                                    "wall_time": left}) + "\n")
                f.write(json.dumps({"event": "applied", "worker": w, "fragment": 0,
                                    "seq": r + 1, "version": r + 2,
                                    "wall_time": t0 + 0.1}) + "\n")


def run(d):
    return subprocess.run([sys.executable, os.path.join(HERE, "phases.py"), d],
                          capture_output=True, text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        write_logs(d)
        out = run(d)
        expected = ["3 rounds of 2 pushes (of 3); median step 10.0 ms",
                    "leave 100 ms apart (10.0 steps;",
                    "push to applied: median 50 ms (5.0 steps); the last pusher's 0 ms",
                    "last pusher, rounds per worker: worker 1 3",
                    "fragment 0: steps after the earliest push: worker 0 0, worker 1 10"]
        for e in expected:
            if out.returncode != 0 or e not in out.stdout:
                failures.append(f"expected {e!r} in:\n{out.stdout}{out.stderr}")
    with tempfile.TemporaryDirectory() as d:
        write_logs(d, with_events=False)
        out = run(d)
        if out.returncode == 0 or "--log_sync_events" not in out.stderr:
            failures.append(f"logs without sync events: rc {out.returncode}, {out.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else f"FAIL: {len(failures)} checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
