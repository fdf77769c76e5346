#!/usr/bin/env python3
"""How far apart an asynchronous fleet's pushes of one round leave, and how long each waits.

  phases.py ARM_DIR
      ARM_DIR: a fleet arm's logs, run with the workers' sync events logged, e.g.
          benchmarks/quality/run.sh --mode=quick --groups=c --arms=c.async4 \\
              --worker_flags=--log_sync_events --report_only --build=BUILD --out=DIR
          phases.py DIR/logs/c.async4

Each push (worker, fragment, seq) is matched to the version whose `applied` event answered it;
the pushes applied in one version of a fragment are one round. Per round: the spread of its
pushes' departures, each push's wait until it was applied, and the last pusher's wait (what the
round itself costs once the fleet's pushes are in). Per worker and fragment: how many steps
after the round's earliest push its push leaves (its phase). Times are the events' wall_time,
written at the step after the event, so they resolve one step. The figures of
benchmarks/quality/RESULTS.md, "Extrapolation", last part.
"""
import collections
import glob
import json
import os
import statistics
import sys


def read(arm_dir):
    push, applied, step_us = {}, {}, []
    for path in sorted(glob.glob(os.path.join(arm_dir, "worker*.jsonl"))):
        for line in open(path):
            e = json.loads(line)
            key = (e.get("worker"), e.get("fragment"), e.get("seq"))
            if e["event"] == "push":
                push[key] = e["wall_time"]
            elif e["event"] == "applied":
                applied[key] = (e["wall_time"], e["version"])
            elif e["event"] == "progress" and e.get("step_time_us"):
                step_us.append(e["step_time_us"])
    rounds = collections.defaultdict(list)  # (fragment, version) -> [(left, applied, worker)]
    for key, (t, version) in applied.items():
        if key in push:
            rounds[(key[1], version)].append((push[key], t, key[0]))
    return rounds, step_us


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rounds, step_us = read(sys.argv[1])
    if not rounds or not step_us:
        sys.exit(f"{sys.argv[1]}: no push/applied events (run the workers with --log_sync_events)")
    step_ms = statistics.median(step_us) / 1e3
    workers = max(len(r) for r in rounds.values())
    full = {k: r for k, r in rounds.items() if len(r) == workers}
    spreads, waits, last_waits = [], [], []
    last = collections.Counter()
    phase = collections.defaultdict(list)  # (fragment, worker) -> steps after the earliest
    for (fragment, _), r in full.items():
        first = min(left for left, _, _ in r)
        spreads.append((max(left for left, _, _ in r) - first) * 1e3)
        waits += [(t - left) * 1e3 for left, t, _ in r]
        left, t, w = max(r)
        last_waits.append((t - left) * 1e3)
        last[w] += 1
        for left, _, w in r:
            phase[(fragment, w)].append((left - first) * 1e3 / step_ms)
    med = statistics.median
    print(f"{len(full)} rounds of {workers} pushes (of {len(rounds)}); median step {step_ms:.1f} ms")
    print(f"a round's pushes leave {med(spreads):.0f} ms apart ({med(spreads) / step_ms:.1f} steps; "
          f"p90 {sorted(spreads)[int(0.9 * len(spreads))]:.0f} ms)")
    print(f"push to applied: median {med(waits):.0f} ms ({med(waits) / step_ms:.1f} steps); the "
          f"last pusher's {med(last_waits):.0f} ms ({med(last_waits) / step_ms:.1f} steps)")
    print("last pusher, rounds per worker: " +
          ", ".join(f"worker {w} {n}" for w, n in sorted(last.items())))
    for fragment in sorted({f for f, _ in phase}):
        print(f"fragment {fragment}: steps after the earliest push: " +
              ", ".join(f"worker {w} {med(phase[(fragment, w)]):.0f}"
                        for w in sorted({w for f, w in phase if f == fragment})))


if __name__ == "__main__":
    main()
