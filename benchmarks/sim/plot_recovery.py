#!/usr/bin/python3
"""Plots diloco-sim --sweep=recovery: left, goodput of async, rigid and elastic against the
recovery time in rounds at each fleet failure rate; right, async's tokens per second over
rigid's and elastic's, beside the paper's 20x.

  benchmarks/sim/plot_recovery.py ROWS OUT.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"async": "tab:green", "rigid": "tab:red", "elastic": "tab:orange"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("out")
    a = ap.parse_args()
    rows = [json.loads(x) for x in open(a.rows) if x.strip()]
    by = {}  # (rate, recovery in rounds) -> {mode: row}
    for r in rows:
        round_s = r["H"] * r["step_time_s"]
        rate = round(r["N"] * round_s / r["M"], 3)
        by.setdefault((rate, r["R"] / round_s), {})[r["mode"]] = r
    rates = sorted({k[0] for k in by})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    for rate, ls in zip(rates, ["-", "--", ":"]):
        keys = sorted(k for k in by if k[0] == rate)
        xs = [k[1] for k in keys]
        for m, color in COLORS.items():
            ax.plot(xs, [by[k][m]["goodput"] for k in keys], ls, color=color, marker="o",
                    label=f"{m}, {rate:g} failures/round")
        for m, color in (("rigid", COLORS["rigid"]), ("elastic", COLORS["elastic"])):
            bx.plot(xs, [by[k]["async"]["tokens_rel"] / by[k][m]["tokens_rel"] for k in keys], ls,
                    color=color, marker="o", label=f"async / {m}, {rate:g} failures/round")
    for x in (ax, bx):
        x.set_xscale("log", base=2)
        x.set_xlabel("recovery time, in rounds (H steps)")
        x.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("goodput")
    ax.set_ylim(0, 1.05)
    ax.set_title("N = 1,000 learners, rounds of 100 s")
    bx.axhline(20, color="gray", lw=1, ls=":")
    bx.text(1, 21, "paper: > 20x", color="gray")
    bx.set_yscale("log")
    bx.set_ylabel("useful tokens/s, async over synchronous")
    bx.set_title("what a failure costs async against synchronous rounds")
    ax.legend(fontsize=7)
    bx.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
