#!/usr/bin/python3
"""Replays benchmarks/fleet/goodput.py's measured rows in the fleet simulation: for each row, the
same mode, N, H, step time, fragments, shards, recovery, detection, window and the row's own
failure schedule (the failure times goodput.py carried out, not a new draw), and prints the
measured and simulated goodput side by side (a markdown table) and writes the pairs as JSON lines.

  benchmarks/sim/validate.py --sim=BUILD/benchmarks/sim/diloco-sim --rows=goodput_rows.jsonl
      [--out=pairs.jsonl] [--rejoin=0]

--rejoin: seconds from a learner's restart to its training on the fleet's model beyond the
simulated pull (process start, Hello, join); not measured for the tiny model, so 0 unless asked.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def seconds(d):
    return float(d[:-2]) / 1000 if d.endswith("ms") else float(d.rstrip("s"))


def simulate(a, row, tmp):
    args = [a.sim, f"--mode={row['mode']}", f"--learners={row['workers']}",
            f"--inner_steps={row['H']}", f"--step_time={seconds(row['step_time'])}",
            f"--fragments={row['fragments']}", f"--shards={row['shards']}",
            f"--recovery={row['recovery_s']}", f"--window={row['window_s']}",
            f"--rejoin={a.rejoin}", f"--seed={row['seed']}"]
    if row.get("detect_s") is not None:
        args.append(f"--detect={row['detect_s']}")
    plan = [(int(w), t) for w, ts in row["schedule"].items() for t in ts]
    if plan:
        path = os.path.join(tmp, "schedule.txt")
        with open(path, "w") as f:
            for w, t in plan:
                f.write(f"{w} {t}\n")
        args.append(f"--schedule={path}")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", required=True)
    ap.add_argument("--rows", required=True)
    ap.add_argument("--out")
    ap.add_argument("--rejoin", type=float, default=0)
    a = ap.parse_args()
    rows = [json.loads(x) for x in open(a.rows) if x.strip()]
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            s = simulate(a, r, tmp)
            pairs.append({"mode": r["mode"], "N": r["workers"], "rate": r["rate_per_round"],
                          "kills": r["worker_kills"], "measured": r["goodput"],
                          "simulated": s["goodput"],
                          "measured_lost_pushes": r["lost_push_fraction"],
                          "simulated_lost_pushes": s["lost_push_fraction"],
                          "rejoin_s": a.rejoin})
    print("| N | failures/round | kills | mode | measured | simulated | sim - measured |")
    print("|---|---|---|---|---|---|---|")
    for p in pairs:
        d = p["simulated"] - p["measured"]
        print(f"| {p['N']} | {p['rate']} | {p['kills']} | {p['mode']} | {p['measured']:.3f} | "
              f"{p['simulated']:.3f} | {d:+.3f} |")
    for m in ("async", "rigid", "elastic"):
        ds = [abs(p["simulated"] - p["measured"]) for p in pairs if p["mode"] == m]
        if ds:
            print(f"{m}: mean |sim - measured| {sum(ds) / len(ds):.3f}, max {max(ds):.3f}, "
                  f"{sum(d <= 0.05 for d in ds)}/{len(ds)} within 0.05")
    if a.out:
        with open(a.out, "w") as f:
            for p in pairs:
                f.write(json.dumps(p) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
