#!/usr/bin/python3
"""The WAN table and figure from the rows wan_rows wrote (--rows=FILE): prints every row as a
Markdown table, and plots utilization against bandwidth at 50 ms RTT (H = 100, int8). Left: the
fleet's utilization over the unsynced ceiling; right: how far the sync fell behind, as steps
per push of a fragment over H (1: every H steps, as configured) and the median push-to-adoption
latency.

  plot.py ROWS.jsonl OUT.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def table(rows):
    cols = ["profile", "H", "codec", "download_codec", "utilization", "ceiling", "ratio",
            "push_ratio", "push_to_adopt_p50_ms", "push_to_adopt_p99_ms",
            "bytes_up_per_param_round", "bytes_down_per_param_round", "rounds"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("-" if r.get(c) is None else str(r[c]).removesuffix(":256")
                                for c in cols) + " |")


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    table(rows)
    sweep = sorted((r for r in rows if r.get("rtt_ms") == 50 and r["H"] == 100
                    and r["codec"].startswith("int8") and r["download_codec"] == "fp32"),
                   key=lambda r: r["rate_mbit"])
    if not sweep:
        sys.exit("plot.py: no 50 ms, H = 100, int8 rows")
    ran = [r for r in sweep if r.get("ratio") is not None]
    failed = [r for r in sweep if r.get("ratio") is None]
    x = [r["rate_mbit"] for r in ran]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(x, [r["ratio"] for r in ran], "o-", label="utilization / ceiling")
    a.axhline(0.97, color="grey", ls="--", lw=1, label="target 0.97")
    b.plot(x, [r["push_ratio"] for r in ran], "s-", color="C1",
           label="pushes made / pushes due")
    for ax in (a, b):
        for r in failed:  # no row: the fleet did not join in time
            ax.axvline(r["rate_mbit"], color="C3", ls=":", lw=1)
            ax.text(r["rate_mbit"] * 1.08, 0.05, "did not join\nin 300 s", color="C3",
                    transform=ax.get_xaxis_transform(), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("link rate per worker (Mbit/s), 50 ms RTT")
        ax.grid(alpha=0.3)
    a.set_ylabel("utilization / unsynced ceiling")
    a.set_ylim(min([0.9] + [r["ratio"] - 0.02 for r in ran]), 1.01)
    a.legend(loc="lower right")
    b.set_ylabel("pushes made / due (1: every H steps)")
    b.set_ylim(0, 1.1)
    p50 = [(r["rate_mbit"], r["push_to_adopt_p50_ms"]) for r in ran
           if r.get("push_to_adopt_p50_ms") is not None]
    if p50:
        c = b.twinx()
        c.plot([v[0] for v in p50], [v[1] / 1000 for v in p50], "^:", color="C2",
               label="push-to-adopt p50 (s)")
        c.set_ylabel("push-to-adoption p50 (s)")
        c.set_ylim(bottom=0)
        c.legend(loc="center right", bbox_to_anchor=(1, 0.45))
    for r in ran:  # synced nothing back in the whole run
        if r.get("push_to_adopt_p50_ms") is None:
            b.annotate("no push\napplied", (r["rate_mbit"], r["push_ratio"]), fontsize=8,
                       xytext=(6, 6), textcoords="offset points", color="C3")
    b.legend(loc="center right", bbox_to_anchor=(1, 0.3))
    fig.suptitle("WAN emulation: 3 workers, 12.8M params, 100 ms steps (GPT-2 124M at 1 s), "
                 "H = 100, int8")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
