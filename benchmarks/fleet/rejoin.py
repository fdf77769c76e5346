#!/usr/bin/env python3
"""Rejoin time: how long a restarted learner and a restarted shard take to be useful again.

Two shards of --model on 127.0.0.1 (a RocksDB store each, --durability=per-round, an audit log)
and --workers (2) synthetic learners (diloco-worker --device=synthetic: the real sync client
and wire, no model math; --step_time a step, H = --inner_steps, --codec pushes (int8), 8
fragments). fp32 pushes hold no error-feedback residual, 4 B/param less per learner: what let
a 1.01B learner join beside the shards on a 23 GB machine, and the whole 1.01B row run there
(benchmarks/fleet/RESULTS.md, "Rejoin time"). Once
they train and the shards have applied a round of pushes:
  learner: the last worker is killed (SIGKILL) and started again at once. Measured from its start
    to its "joined" event (theta(0) known, every fragment pulled: its first step is on the fleet's
    model). Peer, the same run: the same worker's first join, from its first start.
  shard: shard 1 is killed (SIGKILL) and started again on its store at once. Measured from its
    start to listening (its port file: the store recovered) and to the first push it applies
    (its audit log's first "applied" event). Peer: shard 1's first start, on an empty store, to
    listening; and the time from a learner's push to its applied event is the round policy's
    (grace window), not a restart's.
Times are wall clock, polled every 20 ms. Prints one line per figure, and JSON with --out.

  benchmarks/fleet/rejoin.py --build=BUILD --model=gpt2-124m [--step_time=100ms] \\
      [--inner_steps=20] [--workers=2] [--codec=int8] [--worker_flags='--shard_timeout=30s']
      [--out=rejoin.json]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

FRAGMENTS = 8


def count(path, kind):
    return sum(1 for e in cluster.read_events(path) if e.get("event") == kind)


def wait_for(what, predicate, procs, timeout_s):
    """The time.monotonic() at which predicate() was seen to hold (polled every 20 ms); raises
    when a process of `procs` exits or after timeout_s."""
    t0 = time.monotonic()
    while not predicate():
        for p in procs:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} {cluster.describe_exit(p.proc)} while waiting for "
                                   f"{what}; the last lines of {p.log}:\n{cluster.log_tail(p.log)}")
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"no {what} in {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic()


def run(a, run_dir):
    audits = [os.path.join(run_dir, f"audit{i}.jsonl") for i in range(2)]
    shards = [cluster.Shard(a.build, run_dir, i, 2, a.model, FRAGMENTS,
                            ["--durability=per-round", f"--audit_jsonl={audits[i]}"])
              for i in range(2)]
    for s in shards:
        s.audit = audits[s.index]
    result = {"model": a.model, "step_time": a.step_time, "H": a.inner_steps, "codec": a.codec,
              "workers": a.workers}
    t0 = time.monotonic()
    shards[0].start(600)
    t1 = time.monotonic()
    shards[1].start(600)
    result["shard_first_start_to_listening_s"] = time.monotonic() - t1
    result["shard0_first_start_to_listening_s"] = t1 - t0
    eps = [s.endpoint for s in shards]
    workers = [cluster.Worker(a.build, run_dir, w, a.workers, eps, a.model, FRAGMENTS, a.codec,
                              a.inner_steps, a.step_time,
                              ["--duration=3600s", "--log_sync_events"] + a.worker_flags.split())
               for w in range(a.workers)]
    members = shards + workers
    try:
        started = []
        for w in workers:
            started.append(time.monotonic())
            w.start()
        joined = [wait_for(f"worker {w.wid}'s join", lambda w=w: count(w.jsonl, "joined"),
                           members, 1200) for w in workers]
        result["learner_first_join_s"] = joined[-1] - started[-1]
        wait_for("a round of applied pushes",
                 lambda: all(count(p, "applied") >= FRAGMENTS // 2 for p in audits), members, 600)

        victim = workers[-1]
        victim.proc.kill()
        victim.proc.wait()
        cluster.renamed(victim, "restart", "--metrics_jsonl", "jsonl")
        t = time.monotonic()
        victim.start()
        result["learner_rejoin_s"] = wait_for("the restarted worker's join",
                                              lambda: count(victim.jsonl, "joined"), members,
                                              1200) - t
        # The sync client's own figure: from its start (the model and its buffers allocated)
        # to the last fragment adopted.
        ev = cluster.last_event(victim.jsonl, "joined")
        result["learner_rejoin_sync_s"] = ev.get("join_ms", 0) / 1000
        result["learner_rejoined_peak_bytes_per_param"] = ev.get("peak_bytes_per_param")

        s = shards[1]
        s.proc.kill()
        s.proc.wait()
        cluster.renamed(s, "restart", "--audit_jsonl", "audit")
        t = time.monotonic()
        s.start(1200)
        result["shard_restart_to_listening_s"] = time.monotonic() - t
        result["shard_restart_to_first_applied_s"] = wait_for(
            "the restarted shard's first applied push", lambda: count(s.audit, "applied"),
            members, 1200) - t
        result["shard_recovered_fragments"] = count(s.audit, "recovered")
    finally:
        cluster.stop([w.proc for w in workers if w.proc], 60)
        cluster.stop([s.proc for s in shards if s.proc], 300)
        for s in shards:
            shutil.rmtree(s.store, ignore_errors=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--step_time", default="100ms")
    ap.add_argument("--inner_steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--codec", default="int8")
    ap.add_argument("--worker_flags", default="", help="more flags for every learner")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    run_dir = tempfile.mkdtemp(prefix="diloco-rejoin.")
    try:
        r = run(a, run_dir)
    except RuntimeError as e:
        print(f"rejoin: {e} (logs: {run_dir})", file=sys.stderr)
        return 1
    finally:
        cluster.stop_all()
    print(f"model {r['model']}, 2 shards, {a.workers} synthetic learners (step {r['step_time']}, "
          f"H = {r['H']}, {a.codec} pushes, {FRAGMENTS} fragments)")
    ratio = r["learner_rejoin_s"] / r["learner_first_join_s"]
    print(f"learner: restart to joined {r['learner_rejoin_s']:.2f} s (the sync client's join "
          f"{r['learner_rejoin_sync_s']:.2f} s of it); peer, its first join "
          f"{r['learner_first_join_s']:.2f} s (ratio {ratio:.2f})")
    print(f"shard: restart to listening {r['shard_restart_to_listening_s']:.2f} s "
          f"({r['shard_recovered_fragments']} fragments recovered from its store), to its first "
          f"applied push {r['shard_restart_to_first_applied_s']:.2f} s; peer, its first start "
          f"on an empty store to listening {r['shard_first_start_to_listening_s']:.2f} s")
    peak = r["learner_rejoined_peak_bytes_per_param"]
    if peak is not None:  # absent where /proc cannot be read
        print(f"the restarted learner's peak resident memory at its join: {peak:.2f} B/param")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
