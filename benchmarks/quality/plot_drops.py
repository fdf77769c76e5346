#!/usr/bin/python3
"""What half the pushes dropped costs against what half the fleet costs, at 4 and 8 workers.

Reads benchmarks/quality/results/drops/results.tsv (a leading `run` and `seed` column, then
run.sh's results.tsv columns; one row per arm, steps and drop draw) and draws, per run length,
two bars per fleet size: the fleet of half the workers over the fleet (b.sync2 / a.sync4,
a.sync4 / e.sync8), and the fleet with half its pushes dropped over the fleet (the mean of the
draws, each draw a dot). Debian's python3-matplotlib; no other dependency.

  plot_drops.py ROWS.tsv OUT.png
"""

import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (workers, fleet arm, half-fleet arm, dropped arm)
FLEETS = [(4, "a.sync4", "b.sync2", "e.sync4-drop50"), (8, "e.sync8", "a.sync4", "e.sync8-drop50")]


def read(path):
    """{steps: {arm: [loss, ...]}} (a draw run twice counts once: rows whose run says "again"
    repeat an earlier row)."""
    rows = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            if "again" not in r["run"]:
                rows[int(r["steps"])][r["arm"]].append(float(r["loss"]))
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = read(sys.argv[1])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x, ticks, labels = 0.0, [], []
    for steps in sorted(rows):
        arms = rows[steps]
        for workers, fleet, half, dropped in FLEETS:
            if not arms.get(fleet) or not arms.get(half) or not arms.get(dropped):
                continue
            base = arms[fleet][0]
            half_ratio = arms[half][0] / base
            draws = [loss / base for loss in arms[dropped]]
            ax.bar(x, half_ratio - 1, width=0.8, color="tab:blue",
                   label="half the fleet / the fleet" if not ticks else None)
            ax.bar(x + 0.9, statistics.mean(draws) - 1, width=0.8, color="tab:orange",
                   label="50% of pushes dropped / none (mean of the draws)" if not ticks else None)
            ax.scatter([x + 0.9] * len(draws), [d - 1 for d in draws], color="black", s=10,
                       zorder=3, label="one draw (--test_drop_seed)" if not ticks else None)
            ticks.append(x + 0.45)
            labels.append(f"{workers} workers\n{steps} steps")
            x += 2.5
    if not ticks:
        sys.exit(f"{sys.argv[1]}: no steps with a fleet, its half and its drops")
    ax.axhline(0.025, color="tab:red", linestyle="--", linewidth=1,
               label="target: within 2.5% (DiLoCo: +2.1% at 8 replicas)")
    ax.set_xticks(ticks, labels)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"+{100 * v:.0f}%"))
    ax.set_ylabel("held-out loss over the fleet's")
    ax.set_title("Dropped pushes cost what halving the fleet costs (lockstep rounds)")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
