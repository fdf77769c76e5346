#!/usr/bin/python3
"""Replays benchmarks/fleet/goodput.py's measured rows in the fleet simulation: for each row, the
same mode, N, H, step time, fragments, shards, recovery, detection, window and the row's own
failure schedule (the failure times goodput.py carried out, not a new draw), and prints the
measured and simulated goodput side by side with their relative difference (sim / measured - 1),
then a verdict per mode and N against the target (--tolerance, 5% relative), as markdown tables,
and writes the pairs as JSON lines. Beside each lockstep row: what one round of the whole fleet is
worth relative to its measured goodput (round / window / goodput), the resolution a row of a few
rounds has. A second simulated column gives each lockstep row the overhead its fleet showed without
failures: the same run's row of that mode and N at rate 0 lost 1 - g0 to waiting for the slowest
learner on the shared cores, which the simulation takes as a link latency of (1/g0 - 1) x round / 2
each way (a lockstep round then costs round / g0, FleetSimTest.LockstepLinkCostIsTheSyncShareOfA
Round). That row agrees by construction; the failing rows are predicted.

  benchmarks/sim/validate.py --sim=BUILD/benchmarks/sim/diloco-sim --rows=goodput_rows.jsonl[,...]
      [--out=pairs.jsonl] [--rejoin=0] [--tolerance=0.05]

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


def overhead_latency(row, rows):
    """The one-way latency that makes a failure-free lockstep fleet of the simulation lose what the
    row's own run lost without failures: the same mode and N's row at rate 0 of the same run
    (goodput g0 = round / (round + 2 latency)). 0 for async and where that row is missing."""
    if row["mode"] == "async":
        return 0.0
    ref = [r for r in rows if r["mode"] == row["mode"] and r["workers"] == row["workers"] and
           r["rate_per_round"] == 0 and r.get("started") == row.get("started") and
           r["seed"] == row["seed"] and r["recovery_s"] == row["recovery_s"]]
    if not ref or not ref[0]["goodput"] or ref[0]["goodput"] >= 1:
        return 0.0
    return (1 / ref[0]["goodput"] - 1) * row["round_s"] / 2


def simulate(a, row, tmp, latency=0.0):
    args = [a.sim, f"--latency={latency}", f"--mode={row['mode']}", f"--learners={row['workers']}",
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


def relative(p, key="simulated"):
    """sim / measured - 1; None when the measured goodput is 0."""
    return p[key] / p["measured"] - 1 if p["measured"] else None


def one_round(p):
    """A lockstep fleet's round, relative to the measured goodput: the whole fleet's H steps are
    round / window of goodput, so a row whose goodput is a few rounds moves this much with one
    round more or less (None for async, whose learners do not share rounds)."""
    if p["mode"] == "async" or not p["measured"]:
        return None
    return p["round_s"] / p["window_s"] / p["measured"]


def verdicts(pairs, tolerance, key="simulated"):
    """Per mode and N: (mode, N, rows, rows within tolerance, largest |relative|, rows where one
    round is more than the tolerance)."""
    out = []
    for m in ("async", "rigid", "elastic"):
        for n in sorted({p["N"] for p in pairs if p["mode"] == m}):
            rel = [relative(p, key) for p in pairs if p["mode"] == m and p["N"] == n]
            coarse = sum(1 for p in pairs if p["mode"] == m and p["N"] == n and
                         (one_round(p) or 0) > tolerance)
            within = sum(1 for r in rel if r is not None and abs(r) <= tolerance)
            worst = max((abs(r) for r in rel if r is not None), default=float("inf"))
            out.append((m, n, len(rel), within, worst, coarse))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", required=True)
    ap.add_argument("--rows", required=True, help="goodput.py's rows, files separated by commas")
    ap.add_argument("--out")
    ap.add_argument("--rejoin", type=float, default=0)
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="the target: |sim / measured - 1| at most this")
    a = ap.parse_args()
    rows = [json.loads(x) for path in a.rows.split(",") for x in open(path) if x.strip()]
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            s = simulate(a, r, tmp)
            lat = overhead_latency(r, rows)
            cal = simulate(a, r, tmp, lat)["goodput"] if lat else s["goodput"]
            pairs.append({"mode": r["mode"], "N": r["workers"], "rate": r["rate_per_round"],
                          "seed": r["seed"], "recovery_s": r["recovery_s"],
                          "window_s": r["window_s"], "round_s": r["round_s"],
                          "kills": r["worker_kills"], "measured": r["goodput"],
                          "simulated": s["goodput"], "simulated_overhead": cal,
                          "overhead_latency_s": lat,
                          "measured_lost_pushes": r["lost_push_fraction"],
                          "simulated_lost_pushes": s["lost_push_fraction"],
                          "rejoin_s": a.rejoin})
    def pct(x):
        return "-" if x is None else f"{100 * x:+.1f}%"

    print("| N | failures/round | R s | seed | kills | mode | measured | simulated | "
          "sim / measured - 1 | with the rate-0 overhead | sim / measured - 1 | "
          "one round, relative |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in pairs:
        rnd = one_round(p)
        print(f"| {p['N']} | {p['rate']} | {p['recovery_s']:g} | {p['seed']} | {p['kills']} | "
              f"{p['mode']} | {p['measured']:.3f} | {p['simulated']:.3f} | {pct(relative(p))} | "
              f"{p['simulated_overhead']:.3f} | {pct(relative(p, 'simulated_overhead'))} | "
              f"{'-' if rnd is None else f'{100 * rnd:.1f}%'} |")
    for key, what in (("simulated", "the simulation as it is"),
                      ("simulated_overhead", "lockstep rows with their rate-0 row's overhead")):
        print()
        print(f"{what}:")
        print()
        print(f"| mode | N | rows | within {100 * a.tolerance:g}% relative | largest |relative| "
              f"| rows where one round is over {100 * a.tolerance:g}% | verdict |")
        print("|---|---|---|---|---|---|---|")
        for m, n, k, within, worst, coarse in verdicts(pairs, a.tolerance, key):
            verdict = "agrees" if within == k else "DISAGREES"
            print(f"| {m} | {n} | {k} | {within} | {100 * worst:.1f}% | {coarse} | {verdict} |")
    if a.out:
        with open(a.out, "w") as f:
            for p in pairs:
                f.write(json.dumps(p) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
