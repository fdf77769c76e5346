#!/usr/bin/python3
"""Gaps against run length: each arm's held-out loss over its peer's at the same steps.

Reads the rows of several study runs at different --steps (a TSV with a leading `run` column
and run.sh's results.tsv columns; benchmarks/quality/results/lengths/results.tsv) and draws,
for each pair below, the arm's loss over the peer's against the steps per worker, where both
were run at those steps (several runs at one length: each pair of the same run, else every
combination). Debian's python3-matplotlib; no other dependency.

  plot_lengths.py ROWS.tsv OUT.png
"""

import csv
import itertools
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

# (arm, peer, label): what each line shows.
PAIRS = [
    ("e.drop50", "c.async4", "50% of pushes dropped / none (asynchronous)"),
    ("i.topk0.0429", "a.sync4",
     "top-k 4.3% pushes (0.049 B/param/round up), outer step lr 2, no momentum / int8"),
    ("i.topk0.0429-nesterov", "a.sync4", "the same with int8's outer step (lr 1.3, momentum 0.7)"),
    ("i.topk0.03", "a.sync4", "top-k 3% pushes (0.039 B/param/round up), int8's outer step"),
    ("i.topk0.03-h10", "a.sync4", "top-k 3% pushes, H = 10, int8's outer step / int8 at H = 50"),
    ("i.int4-h100", "a.sync4", "int4 pushes, H = 100 / int8 at H = 50"),
    ("d.int4", "a.sync4", "int4 pushes / int8, H = 50"),
]


def read(path):
    """{steps: {arm: [(run, loss), ...]}}"""
    rows = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            rows[int(r["steps"])][r["arm"]].append((r["run"], float(r["loss"])))
    return rows


def ratios(by_arm, arm, peer):
    """The arm's losses over the peer's at one length: same-run pairs where there are any."""
    a, p = by_arm.get(arm, []), by_arm.get(peer, [])
    same = [x / y for (ra, x), (rp, y) in itertools.product(a, p) if ra == rp]
    return same or [x / y for (_, x), (_, y) in itertools.product(a, p)]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = read(sys.argv[1])
    fig, ax = plt.subplots(figsize=(8, 5))
    top = 1.12  # points above it are written at the top edge
    drawn = 0
    for arm, peer, label in PAIRS:
        pts = [(s, r) for s in sorted(rows) for r in ratios(rows[s], arm, peer)]
        if not pts:
            continue
        steps = sorted({s for s, _ in pts})
        at = {s: [r for s2, r in pts if s2 == s] for s in steps}
        mean = [sum(at[s]) / len(at[s]) for s in steps]
        (line,) = ax.plot(steps, [min(m, top) for m in mean], marker="o", label=label)
        ax.scatter([s for s, _ in pts], [min(r, top) for _, r in pts], color=line.get_color(),
                   s=12)
        for s, m in zip(steps, mean):
            if m > top:
                ax.annotate(f"{m:.3f}", (s, top), textcoords="offset points", xytext=(6, -12),
                            color=line.get_color(), fontsize=8)
        drawn += 1
    if drawn == 0:
        sys.exit(f"no pair of arms at a common length in {sys.argv[1]}")
    ax.set_ylim(0.98, top + 0.005)
    for y, what, style in [(1.025, "drops' target", "--"), (1.01, "bytes frontier's target", ":")]:
        ax.axhline(y, color="grey", ls=style, lw=0.8)
        ax.annotate(f"{what} {y}", (1, y), xycoords=("axes fraction", "data"), ha="right",
                    va="bottom", color="grey", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xticks(sorted(rows))
    ax.set_xlabel("inner steps per worker (cosine schedule over each run)")
    ax.set_ylabel("held-out loss over the peer's at the same steps")
    ax.set_title("Gaps against run length (tiny GPT, 4 workers, exported global model)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
