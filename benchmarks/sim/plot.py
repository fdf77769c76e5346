#!/usr/bin/python3
"""Plots the fleet simulation's sweep (diloco-sim --sweep=all --out=ROWS): left, goodput against
learners (each a failure unit) for async, rigid and elastic at each per-learner mean time to
failure of the scale sweep, beside the paper's 88% (decoupled) and 27% (data-parallel); right,
the N = 8, 16, 32 sweep against fleet failures per round, with goodput.py's measured rows as
open markers when --measured is given.

  benchmarks/sim/plot.py ROWS OUT.png [--measured=goodput_rows.jsonl]
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"async": "tab:green", "rigid": "tab:red", "elastic": "tab:orange"}
YEAR = 365.25 * 86400


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("out")
    ap.add_argument("--measured")
    a = ap.parse_args()
    rows = [json.loads(x) for x in open(a.rows) if x.strip()]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    scale = [r for r in rows if r["N"] >= 1000]
    styles = {}
    for r in scale:
        styles.setdefault(round(r["M"] / YEAR, 3), None)
    ls = ["-", "--", ":"]
    for i, years in enumerate(sorted(styles, reverse=True)):
        for m in COLORS:
            pts = sorted((r["N"], r["goodput"]) for r in scale
                         if r["mode"] == m and round(r["M"] / YEAR, 3) == years)
            if pts:
                ax.plot(*zip(*pts), ls[i % 3], marker="o", color=COLORS[m],
                        label=f"{m}, MTTF {years:g} y per learner")
    ax.axhline(0.88, color="tab:green", lw=0.8, ls="-.", label="paper: Decoupled DiLoCo 88%")
    ax.axhline(0.27, color="tab:red", lw=0.8, ls="-.", label="paper: data-parallel 27%")
    ax.set_xscale("log")
    ax.set_xlabel("learners (failure units)")
    ax.set_ylabel("goodput")
    ax.set_ylim(0, 1.05)
    ax.set_title("Simulated: step 1 s, H = 100, recovery 10 min")
    ax.legend(fontsize=6.5)
    ax.grid(alpha=0.3)
    small = [r for r in rows if r["N"] < 1000]
    markers = {8: "o", 16: "s", 32: "^"}
    for n, mk in markers.items():
        for m in COLORS:
            pts = sorted((r["failures_per_round"], r["goodput"]) for r in small
                         if r["N"] == n and r["mode"] == m)
            if pts:
                bx.plot(*zip(*pts), marker=mk, color=COLORS[m], label=f"sim {m}, N={n}")
    if a.measured:
        for x in (json.loads(l) for l in open(a.measured) if l.strip()):
            bx.plot(x["failures_per_round"], x["goodput"], markers.get(x["workers"], "o"),
                    mfc="none", color=COLORS[x["mode"]])
        bx.plot([], [], "o", mfc="none", color="gray", label="measured (goodput.py)")
    bx.set_xscale("symlog", linthresh=0.1)
    bx.set_xlabel("learner failures per round, fleet-wide (in the window)")
    bx.set_ylabel("goodput")
    bx.set_ylim(0, 1.05)
    bx.set_title("N = 8, 16, 32: goodput.py's settings")
    bx.legend(fontsize=6, ncol=2)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
