#!/usr/bin/env python3
"""The convergence study's table, plots and bounds (benchmarks/quality/run.sh writes the inputs).

  summarize.py [--mode=quick|full|smoke] [--report_only] OUT_DIR
      table.md + loss_vs_tokens.png + loss_vs_time.png in OUT_DIR; prints each gate (quick) or
      target (full) as met or missed and exits 1 when one is missed (--report_only: 0; smoke
      mode checks the script only and always reports)
  summarize.py --tokens --batch=B --seq=T JSONL...   tokens trained by these workers

Every arm is a ratio to its group's baseline, run in the same study on the same held-out tokens.
The final figure of an arm is its exported global model (or a lone worker's saved model); the
curves are worker 0's periodic evaluations of the last global model it adopted (a lone worker:
its own model), on the same tokens.
"""
import argparse
import csv
import json
import os
import sys

# group -> (baseline arm, [(arm, target ratio or None, what the papers report)])
GROUPS = {
    "a": ("a.lone4x", [("a.sync4", 1.00, "DiLoCo Table 2: 0.982")]),
    "b": ("b.sync1", [("b.sync2", None, "paper 15.18/16.23 = 0.935"),
                      ("a.sync4", None, "paper 15.02/16.23 = 0.925")]),
    "c": ("a.sync4", [("c.async4", 1.01, "target <= 1.01"),
                      ("c.naive4", None, "Liu et al.: naive async 1.071"),
                      ("c.arrived4", None, "rounds normalised by what arrived"),
                      ("c.fullstep4", None, "a whole momentum step per round"),
                      ("c.composed4", None, "partial steps composing exactly"),
                      ("c.replace4", None, "adoption replaces local"),
                      ("c.lerp4", None, "adoption lerp 0.5")]),
    "d": ("d.fp32", [("d.bf16", 1.005, ""), ("a.sync4", 1.005, "int8: INTELLECT-1 no loss"),
                     ("d.int4", 1.01, "Decoupled DiLoCo +0.09%"), ("d.int4-noef", None, "")]),
    "e": ("c.async4", [("e.drop10", None, ""), ("e.drop30", None, ""),
                       ("e.drop50", 1.025, "paper +2.1% at 50%"), ("e.kill1", None, "")]),
    "f": ("f.homog", [("f.hetero", None, ""), ("f.hetero-dylu", 1.02, "target within 2%")]),
    "h": ("h.down-fp32", [("h.down-int8", 1.005, "target: int8 down within 0.5% of fp32"),
                          ("h.down-int4", None, "")]),
}
# Comparisons within a group against another baseline than the group's: (group, arm, baseline,
# note). f: DyLU's unequal pushes in synchronous rounds against the same tokens spread evenly.
PAIRS = [("f", "f.sync-dylu", "f.sync-even", "synchronous: H, H/2, H/4, H vs 4 x their mean")]
# Quick mode's gates (deploy/test.sh): (arm, baseline, "max" or "min", bound, what it checks).
# Each bound comes from measured scatter (benchmarks/RESULTS.md, "The quick mode's gates", with
# the commands): a deterministic arm is gated a few thousandths above its value; a timed arm at
# its worst reading over quiet and loaded runs plus a margin; QUICK_GATES_MEASURED says when.
QUICK_GATES_MEASURED = "2026-12-03"
QUICK_GATES = [
    ("a.sync4", "a.lone4x", "max", 1.026,
     "lockstep DiLoCo (4 workers, quorum 4) vs one worker with a 4x batch, equal tokens: "
     "deterministic given theta(0) (1.0232-1.0233 in ten runs); a change to its numbers "
     "trips it"),
    ("c.async4", "a.sync4", "max", 1.045,
     "asynchronous rounds (defaults) vs lockstep DiLoCo, equal tokens: timing-dependent "
     "(1.009-1.032 in ten runs, quiet and loaded); the target is 1.01"),
    ("c.naive4", "a.sync4", "min", 1.5,
     "the study can see a broken rule: naive per-push Nesterov (no round normalisation, "
     "adoption by replacement) must end far worse than lockstep DiLoCo"),
    ("g.main.1", "g.lone.1", "max", 1.02,
     "the main job as shipped (3 workers, 2 shards) vs one worker on both cores, equal wall "
     "time: timing-dependent (0.985-1.004 in eight runs, quiet and loaded); the full study's "
     "target is 0.95"),
]


def check_gates(gates, loss):
    """(lines, missed): each gate's value and met/missed; a gate whose arms did not run is
    missed too (a renamed arm must not drop out of the gate unseen)."""
    lines, missed = [], []
    for arm, base, kind, bound, what in gates:
        if arm not in loss or base not in loss:
            missed.append(f"gate {arm}/{base}: not run")
            lines.append(f"  missed  {arm}/{base}: not run ({what})")
            continue
        ratio = loss[arm] / loss[base]
        ok = ratio <= bound if kind == "max" else ratio >= bound
        sign = "<=" if kind == "max" else ">="
        lines.append(f"  {'met   ' if ok else 'missed'}  {arm}/{base} = {ratio:.4f} "
                     f"(gate {sign} {bound}): {what}")
        if not ok:
            missed.append(f"gate {arm}/{base} = {ratio:.4f}, not {sign} {bound}")
    return lines, missed


MAIN_JOB_TARGET = 0.95  # group g: the fleet's export at least 5% below the lone worker, every run
END_OF_RUN_TARGET = {"full": 1.01, "quick": 1.02}  # export vs the best late global version


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def tokens(files, batch, seq):
    total = 0
    for path in files:
        ev = read_jsonl(path)
        done = [e for e in ev if e["event"] == "done"]
        if done:
            total += done[-1]["steps"] * batch * seq
        else:  # killed: what its last progress or eval event says
            seen = [e.get("tokens", 0) for e in ev if e["event"] in ("progress", "eval")]
            total += max(seen or [0])
    return total


def curve(out, arm):
    path = os.path.join(out, "curves", arm + ".w0.jsonl")
    if not os.path.exists(path):
        return []
    pts = []
    for e in read_jsonl(path):
        if e["event"] != "eval":
            continue
        loss = e.get("loss_global", e.get("loss_local"))
        pts.append((e["step"], e["tokens"], e["elapsed_s"], loss))
    return pts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="full")
    ap.add_argument("--tokens", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--report_only", action="store_true",
                    help="print what was met and missed, exit 0 either way")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.tokens:
        print(tokens(a.paths, a.batch, a.seq))
        return 0
    if a.mode == "smoke":  # 60 steps check the script, not the training: nothing to gate
        a.report_only = True
    out = a.paths[0]
    with open(os.path.join(out, "results.tsv")) as f:
        rows = {r["arm"]: r for r in csv.DictReader(f, delimiter="\t")}
    loss = {k: float(r["loss"]) for k, r in rows.items()}
    lines = ["| group | arm | workers | tokens | wall s | held-out loss | baseline | ratio | "
             "target | published |", "|---|---|---|---|---|---|---|---|---|---|"]
    missed, targets = [], []

    def row(group, arm, base, target, note):
        r = rows[arm]
        ratio = loss[arm] / loss[base] if base in loss else float("nan")
        ok = "" if target is None else ("met" if ratio <= target else "**missed**")
        if target is not None:
            targets.append(f"  {'met   ' if ratio <= target else 'missed'}  {arm}/{base} = "
                           f"{ratio:.4f} (target <= {target})")
        if target is not None and not ratio <= target:
            missed.append(f"{arm}/{base} = {ratio:.4f} > {target}")
        tgt = "" if target is None else f"<= {target:.3f} ({ok})"
        lines.append(f"| {group} | {arm} | {r['workers']} | {r['tokens']} | {r['wall_s']} | "
                     f"{loss[arm]:.4f} | {base} | {ratio:.4f} | {tgt} | {note} |")

    for g, (base, arms) in GROUPS.items():
        # A group run on its own (run.sh --groups=e) ran its own asynchronous baseline; a study
        # merged from runs renames it e.async4 to keep it beside group c's.
        if g == "e" and "e.async4" in loss:
            base = "e.async4"
        if base not in loss:
            continue
        lines.append(f"| {g} | {base} | {rows[base]['workers']} | {rows[base]['tokens']} | "
                     f"{rows[base]['wall_s']} | {loss[base]:.4f} | (baseline) | 1 | | |")
        for arm, target, note in arms:
            if arm in loss:
                row(g, arm, base, target, note)
    for group, arm, base, note in PAIRS:
        if arm in loss and base in loss:
            row(group, arm, base, None, note)
    r = 1
    while f"g.main.{r}" in loss and f"g.lone.{r}" in loss:
        row("g", f"g.main.{r}", f"g.lone.{r}", MAIN_JOB_TARGET, "target <= 0.95 in every run")
        r += 1

    # End of run: the export against the best global version worker 0 saw in the last 10%.
    end_lines = []
    for arm in loss:
        if arm.startswith(("a.lone", "g.lone")):
            continue
        pts = curve(out, arm)
        if not pts:
            continue
        last = max(p[0] for p in pts)
        best = min(p[3] for p in pts if p[0] >= 0.9 * last)
        final = float(rows[arm]["curve_loss"])  # the export on the curves' tokens
        ratio = final / best
        end_lines.append(f"| {arm} | {best:.4f} | {final:.4f} | {ratio:.4f} |")
        target = END_OF_RUN_TARGET.get(a.mode, 1.01)
        # The main job stops on the workers' clocks: its end is a known gap (RESULTS.md), shown
        # in the table but not a gate of quick mode.
        gated = not arm.startswith("c.naive") and not (a.mode == "quick" and arm.startswith("g."))
        if ratio > target and gated:
            missed.append(f"end of run {arm}: export {final:.4f} vs best late global "
                          f"{best:.4f} ({ratio:.4f} > {target})")
    if end_lines:
        lines += ["", "End of run: the export vs the best global version of the last 10% "
                  "(worker 0's evaluations; both on the curves' 8,192 held-out tokens)", "",
                  "| arm | best late global | export | ratio (target <= 1.01) |",
                  "|---|---|---|---|"] + end_lines
    table = "\n".join(lines)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    plot(out, loss, rows)
    if a.mode == "quick":
        # Quick mode gates on its own bounds (the full study's targets need its 1500 steps) and
        # on the end-of-run rule. Only the groups that ran are gated.
        ran = {arm.split(".")[0] for arm in loss}
        gates = [g for g in QUICK_GATES if g[0].split(".")[0] in ran]
        gate_lines, gate_missed = check_gates(gates, loss)
        missed = [m for m in missed if m.startswith("end of run")] + gate_missed
        print(f"\nquick mode's gates (bounds measured {QUICK_GATES_MEASURED}, "
              "benchmarks/RESULTS.md):\n" + "\n".join(gate_lines))
    elif targets:
        print("\ntargets:\n" + "\n".join(targets))
    print(f"\n{len(missed)} missed" + (":\n  " + "\n  ".join(missed) if missed else ""))
    if missed and a.report_only:
        print("(--report_only: exit status 0)")
        return 0
    return 1 if missed else 0


def group_arms(g, loss):
    """The arms drawn in group g's panel: its baseline and the arms it is compared with."""
    if g in GROUPS:
        base, arms = GROUPS[g]
        if g == "e" and "e.async4" in loss:
            base = "e.async4"
        paired = [x for grp, arm, b, _ in PAIRS if grp == g for x in (arm, b)]
        return [a for a in [base] + [a for a, _, _ in arms] + paired if a in loss]
    return sorted(a for a in loss if a.startswith(g + "."))


def plot(out, loss, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plots; apt-get install python3-matplotlib)")
        return
    groups = sorted({arm.split(".")[0] for arm in loss})
    cols = min(4, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    for x_index, name, xlabel in ((1, "loss_vs_tokens.png", "tokens trained by the fleet"),
                                  (2, "loss_vs_time.png", "wall time, s")):
        fig, axes = plt.subplots(nrows, cols, figsize=(4.5 * cols, 3.6 * nrows), squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i >= len(groups):
                ax.axis("off")
                continue
            g = groups[i]
            top = 0
            for arm in group_arms(g, loss):
                pts = curve(out, arm)
                if not pts:
                    continue
                workers = int(rows[arm]["workers"])
                xs = [p[x_index] * (workers if x_index == 1 else 1) for p in pts]
                ys = [p[3] for p in pts]
                ax.plot(xs, ys, label=f"{arm} (export {loss[arm]:.3f})")
                if loss[arm] < 3:  # a diverged arm (naive per-push rounds) leaves the scale
                    top = max(top, max(ys))
            ax.set_ylim(1.0, min(top, 4.0) if top else 4.0)  # the floor is about 1.08
            ax.set_title(f"group {g}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("held-out loss, nats/token")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=80)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
