#!/usr/bin/python3
"""deploy/run_report.py on run directories made here: the PNGs it promises are written and are
PNGs, the held-out plot only when the learners evaluated the global model, figures that are NaN,
negative or missing and lines that are not JSON are skipped without failing, and a directory
without learner events or that does not exist is an error with its own exit status.
Exit status 0 pass, 1 fail, 77 skip (no matplotlib for this interpreter)."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("SKIP: matplotlib is not installed for", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "deploy", "run_report.py")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def write(path, events, extra_lines=()):
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
        for line in extra_lines:
            f.write(line + "\n")


def learner(w, t0, evals, wall=True):
    out = []
    for i in range(1, 7):
        e = {"event": "progress", "worker": w, "step": 50 * i, "elapsed_s": 5.0 * i,
             "loss": 3.0 - 0.2 * i, "utilization": 0.95, "pushes": 4 * i, "applied": 4 * i - 1,
             "bytes_sent": 100000 * i, "bytes_received": 250000 * i}
        if wall:
            e["wall_time"] = t0 + 5.0 * i
        out.append(e)
        if evals:
            out.append({"event": "eval", "worker": w, "step": 50 * i, "loss_global": 2.9 - 0.2 * i,
                        "wall_time": t0 + 5.0 * i})
    out[2]["loss"] = float("nan")      # written as NaN by a bad learner: skipped
    out[3]["utilization"] = -1.0       # negative: skipped
    del out[4]["bytes_sent"]           # missing: skipped
    return out


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def main():
    tmp = tempfile.mkdtemp(prefix="run_report_test.")
    t0 = 1_800_000_000.0
    # A run whose learners evaluated the global model, one file from before wall_time existed.
    a = os.path.join(tmp, "a")
    os.makedirs(a)
    write(f"{a}/worker0.jsonl", learner(0, t0, evals=True), ["not json", "[1, 2]"])
    write(f"{a}/worker1.jsonl", learner(1, t0 + 2, evals=False, wall=False))
    write(f"{a}/worker0.jsonl.rank1", [{"event": "progress", "loss": 99}])
    write(f"{a}/shard0.jsonl", [
        {"event": "progress", "wall_time": t0 + 5 * i,
         "stats": {"rounds": 3 * i, "pushes": {"queued": 6 * i, "stale": i}}} for i in range(1, 5)])
    r = run(a, f"--out={tmp}/a-out")
    check(r.returncode == 0, f"run a: exit {r.returncode}: {r.stderr}")
    for name in ("loss", "heldout", "bytes", "pushes", "goodput"):
        p = f"{tmp}/a-out/{name}.png"
        check(os.path.exists(p) and is_png(p), f"run a: {name}.png not written as a PNG")
        check(f"wrote {p}" in r.stdout, f"run a: {name}.png not reported: {r.stdout}")
    check("2 lines that are not JSON objects" in r.stdout, f"bad lines not counted: {r.stdout}")
    # Without evaluations: no heldout.png, and the report says how to get it.
    b = os.path.join(tmp, "b")
    os.makedirs(b)
    write(f"{b}/worker0.jsonl", learner(0, t0, evals=False))
    r = run(b)
    check(r.returncode == 0, f"run b: exit {r.returncode}: {r.stderr}")
    check(os.path.exists(f"{b}/loss.png") and not os.path.exists(f"{b}/heldout.png"),
          "run b: loss.png written into the run directory, heldout.png not")
    check("--eval_every" in r.stdout, f"run b: no hint for heldout.png: {r.stdout}")
    # No learner events; no directory.
    c = os.path.join(tmp, "c")
    os.makedirs(c)
    write(f"{c}/shard0.jsonl", [{"event": "progress"}])
    r = run(c)
    check(r.returncode == 1 and "no learner events" in r.stderr, f"run c: {r.returncode} {r.stderr}")
    r = run(os.path.join(tmp, "missing"))
    check(r.returncode == 2 and "not a directory" in r.stderr, f"missing: {r.returncode}")
    print("PASS" if not failures else f"FAIL: {len(failures)} checks (files in {tmp})")
    if not failures:
        subprocess.run(["rm", "-rf", tmp])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
