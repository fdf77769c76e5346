#!/usr/bin/python3
"""The --codec=auto / --inner_steps=auto rows (wan_rows --mode=auto) against the hand-set ones
(H = 100, int8 pushes) at 50 ms RTT: prints the auto rows as a Markdown table and plots, against
the link rate, the fleet's utilization over the unsynced ceiling (left) and the share of the
pushes its schedule asked for that were made (right: for auto, after each worker's last change
of H; each point labelled with the choice).

  plot_auto.py AUTO_ROWS.jsonl FIXED_ROWS.jsonl OUT.png
"""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows_of(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def settled(r):
    xs = [x for x in r.get("settled_push_ratio") or [] if x is not None]
    return statistics.median(xs) if xs else None


def choice(r):
    codecs = sorted(set(c.removesuffix(":256") for c in r.get("codec_chosen", [])))
    hs = r.get("H_chosen") or []
    h = f"H {hs[0]}" if len(set(hs)) == 1 else f"H {min(hs)}-{max(hs)}" if hs else "H ?"
    return f"{'/'.join(codecs)} {h}"


def table(rows):
    cols = ["profile", "choice", "link_choices", "utilization", "ceiling", "ratio", "push_ratio",
            "settled", "h_effective", "push_to_adopt_p50_ms", "push_to_adopt_p99_ms",
            "bytes_up_per_param_round", "bytes_down_per_param_round", "rounds"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        vals = dict(r, choice=choice(r), settled=settled(r))
        print("| " + " | ".join("-" if vals.get(c) is None else str(vals[c]) for c in cols) + " |")


def main():
    auto = sorted(rows_of(sys.argv[1]), key=lambda r: r["rate_mbit"])
    fixed = sorted((r for r in rows_of(sys.argv[2]) if r.get("rtt_ms") == 50 and r["H"] == 100
                    and r["codec"].startswith("int8") and r["download_codec"] == "fp32"
                    and r.get("ratio") is not None), key=lambda r: r["rate_mbit"])
    table(auto)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot([r["rate_mbit"] for r in fixed], [r["ratio"] for r in fixed], "s--", color="C7",
           label="H = 100, int8 pushes, fp32 downloads")
    a.plot([r["rate_mbit"] for r in auto], [r["ratio"] for r in auto], "o-", color="C0",
           label="auto (int8 downloads)")
    a.axhline(0.97, color="grey", ls="--", lw=1, label="target 0.97")
    a.set_ylabel("utilization / unsynced ceiling")
    a.set_ylim(min([0.9] + [r["ratio"] - 0.02 for r in auto + fixed]), 1.01)
    a.legend(loc="lower right", fontsize=8)
    b.plot([r["rate_mbit"] for r in fixed], [r["push_ratio"] for r in fixed], "s--", color="C7",
           label="H = 100 int8: pushes made / due")
    pts = [(r["rate_mbit"], settled(r), choice(r)) for r in auto if settled(r) is not None]
    b.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="C0",
           label="auto: made / due after the last choice")
    for x, y, label in pts:
        b.annotate(label, (x, y), fontsize=8, xytext=(4, -14), textcoords="offset points")
    b.set_ylabel("pushes made / pushes the schedule asked for")
    b.set_ylim(0, 1.15)
    b.legend(loc="lower right", fontsize=8)
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_xlabel("link rate per worker (Mbit/s), 50 ms RTT")
        ax.grid(alpha=0.3)
    fig.suptitle("WAN emulation: codec and H chosen from the link (3 workers, 12.8M params, "
                 "100 ms steps)")
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=110)


if __name__ == "__main__":
    main()
