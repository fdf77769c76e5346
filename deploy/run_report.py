#!/usr/bin/python3
"""A run's report: PNGs drawn from the JSON event files of a run directory.

Reads every learner's events (worker*.jsonl, the --metrics_jsonl of diloco-worker; island ranks'
.rank<r> files are left out, rank 0 speaks for the island) and every shard's (shard*.jsonl) and
writes, into --out (default: the run directory):

  loss.png      each learner's training loss (its moving average) over wall-clock time;
  heldout.png   the global model's held-out loss at each evaluation, per learner that evaluated
                it (diloco-worker --eval_every=N writes "eval" events with loss_global); without
                such events the file is not written and the report says how to get it;
  bytes.png     bytes each learner sent (pushes) and received (downloads), cumulative;
  pushes.png    pushes merged and stale per round, each shard, between its progress events;
  goodput.png   each learner's goodput over time: its utilization (time in training steps)
                times the share of its pushes the shards applied.

Times are minutes since the first event of the run (wall_time, which every event carries; the
older files without it fall back to each file's elapsed_s). Figures that are missing, NaN or
negative in an event are skipped, never fatal. Prints the files it wrote.

  deploy/run_report.py RUN_DIR [--out=DIR]
Exit status 0 when at least loss.png was written, 1 when the directory holds no learner events,
2 for bad arguments or when matplotlib is missing.
"""
import argparse
import glob
import json
import math
import os
import re
import sys


def read_events(path):
    """The JSON objects of a JSON-lines file; lines that do not parse are counted, not fatal."""
    events, bad = [], 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(e, dict):
                events.append(e)
            else:
                bad += 1
    return events, bad


def number(e, key):
    """e[key] as a finite float >= 0, else None."""
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) and v >= 0 else None


def files(run, prefix):
    out = []
    for p in sorted(glob.glob(os.path.join(run, f"{prefix}*.jsonl"))):
        m = re.fullmatch(rf"{prefix}(\d+)\.jsonl", os.path.basename(p))
        if m:
            out.append((int(m.group(1)), p))
    return out


class Clock:
    """Minutes since the run's first wall_time; a file without wall_time uses its elapsed_s."""

    def __init__(self, all_events):
        stamps = [number(e, "wall_time") for events in all_events for e in events]
        stamps = [s for s in stamps if s is not None]
        self.t0 = min(stamps) if stamps else None

    def minutes(self, e):
        t = number(e, "wall_time")
        if t is not None and self.t0 is not None:
            return (t - self.t0) / 60
        t = number(e, "elapsed_s")
        return None if t is None else t / 60


def series(events, clock, kind, key):
    xs, ys = [], []
    for e in events:
        if e.get("event") != kind:
            continue
        x, y = clock.minutes(e), number(e, key)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def draw(plt, path, title, ylabel, lines, log_y=False):
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (xs, ys), style in lines:
        ax.plot(xs, ys, style, label=label, markersize=3)
    ax.set_title(title)
    ax.set_xlabel("minutes since the run's first event")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def per_round(shard_events, clock):
    """(minutes, applied per round, stale per round) between successive progress events."""
    points = []
    prev = None
    for e in shard_events:
        s = e.get("stats")
        if e.get("event") != "progress" or not isinstance(s, dict):
            continue
        pushes = s.get("pushes") if isinstance(s.get("pushes"), dict) else {}
        cur = (number(s, "rounds"), number(pushes, "queued"), number(pushes, "stale"))
        t = clock.minutes(e)
        if None in cur or t is None:
            continue
        if prev is not None and cur[0] > prev[0]:
            rounds = cur[0] - prev[0]
            points.append((t, (cur[1] - prev[1]) / rounds, (cur[2] - prev[2]) / rounds))
        prev = cur
    return points


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not os.path.isdir(a.run):
        print(f"run_report: {a.run} is not a directory", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("run_report: matplotlib is missing (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 2
    out = a.out or a.run
    os.makedirs(out, exist_ok=True)

    learners = {w: read_events(p) for w, p in files(a.run, "worker")}
    shards = {s: read_events(p) for s, p in files(a.run, "shard")}
    for name, group in (("worker", learners), ("shard", shards)):
        for i, (_, bad) in group.items():
            if bad:
                print(f"run_report: {name}{i}.jsonl: {bad} lines that are not JSON objects "
                      "skipped")
    learners = {w: ev for w, (ev, _) in learners.items()}
    shards = {s: ev for s, (ev, _) in shards.items()}
    if not any(learners.values()):
        print(f"run_report: no learner events (worker<N>.jsonl) in {a.run}", file=sys.stderr)
        return 1
    clock = Clock(list(learners.values()) + list(shards.values()))
    wrote = []

    wrote.append(draw(plt, os.path.join(out, "loss.png"), "Training loss per learner",
                      "loss (nats per token, moving average)",
                      [(f"learner {w}", series(ev, clock, "progress", "loss"), "-o")
                       for w, ev in sorted(learners.items())]))

    heldout = [(f"global model (learner {w})", series(ev, clock, "eval", "loss_global"), "-o")
               for w, ev in sorted(learners.items())]
    heldout = [h for h in heldout if h[1][0]]
    if heldout:
        wrote.append(draw(plt, os.path.join(out, "heldout.png"),
                          "Held-out loss of the global model", "loss (nats per token)",
                          heldout))
    else:
        print("run_report: no held-out evaluations of the global model (run the learners with "
              "--eval_every=N to get heldout.png)")

    bytes_lines = []
    for w, ev in sorted(learners.items()):
        for key, word, style in (("bytes_sent", "sent", "-"), ("bytes_received", "received",
                                                               "--")):
            xs, ys = series(ev, clock, "progress", key)
            bytes_lines.append((f"learner {w} {word}", (xs, [y / 2**20 for y in ys]), style))
    wrote.append(draw(plt, os.path.join(out, "bytes.png"), "Bytes on the wire per learner",
                      "MiB (cumulative)", bytes_lines))

    push_lines = []
    for s, ev in sorted(shards.items()):
        pts = per_round(ev, clock)
        push_lines.append((f"shard {s} merged", ([p[0] for p in pts], [p[1] for p in pts]),
                           "-o"))
        push_lines.append((f"shard {s} stale", ([p[0] for p in pts], [p[2] for p in pts]), "--x"))
    if push_lines:
        wrote.append(draw(plt, os.path.join(out, "pushes.png"), "Pushes per round",
                          "pushes per round", push_lines))

    good = []
    for w, ev in sorted(learners.items()):
        xs, ys = [], []
        for e in ev:
            if e.get("event") != "progress":
                continue
            t, u = clock.minutes(e), number(e, "utilization")
            pushes, applied = number(e, "pushes"), number(e, "applied")
            if t is None or u is None:
                continue
            share = applied / pushes if pushes and applied is not None else 1.0
            xs.append(t)
            ys.append(u * min(share, 1.0))
        good.append((f"learner {w}", (xs, ys), "-o"))
    wrote.append(draw(plt, os.path.join(out, "goodput.png"),
                      "Goodput per learner: utilization x share of pushes applied",
                      "goodput (0..1)", good))
    for p in wrote:
        print(f"run_report: wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
