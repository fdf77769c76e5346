#!/usr/bin/python3
"""Goodput under failures: N synthetic learners (diloco-worker --device=synthetic) against 2 shards
on 127.0.0.1, each learner failing by a seeded process (exponential time to failure of mean M
seconds, SIGKILLed, down for --recovery seconds, then started again with a new generation and
rejoining), optionally shards too (--shard_failures: SIGKILLed, restarted on their stores). The
same schedule (one seed: the same failure times) runs against three modes:

  async    the fleet as shipped: asynchronous rounds (quorum 1, adaptive grace window, grace cap
           5 s, worker timeout 10 s), learners streaming their fragments and never waiting;
  rigid    synchronous DiLoCo that needs every worker: learners in --lockstep with every fragment
           pushed at once every H steps (--stream=false: streamed pushes in lockstep deadlock a
           rejoined learner against the fleet's phase), shards at --quorum=N with the grace cap
           and the worker timeout at 10 minutes: a failed learner stalls the fleet until it is
           back and has pushed;
  elastic  the same learners, the round re-forming without a failed member once it is detected
           (torchft-like): --quorum=N --elastic_quorum closes a round once every live worker has
           pushed (server/round_policy.cc), and a learner silent for --detect seconds (the
           shards' --worker_timeout) is no longer live.

Goodput of a row = useful learner-steps in the window / (N x window x r0), with r0 the per-learner
step rate of the async row without failures (M = infinity) of the same N, this run. A step is
useful when its work reached a push some shard applied (the shards' audit logs: steps of every
applied push, by worker, generation and fragment, averaged over the fragments), or, for a learner
still up at the end, would: its steps less those of its pushes that were refused or stale and those
its re-anchoring dropped (its own sync events). A killed learner's steps after its last applied
push are lost. The window runs from the moment every learner trains to --duration later; the step
counts at its ends are read from the learners' progress events (every 250 ms). At the end every
learner still up is SIGKILLed (killed like the failures, the window's end is no clean stop),
after a check that none exited unasked; the shards are stopped
with SIGTERM and must exit 0.

Rows (JSON lines) go to OUT/goodput_rows.jsonl and the plot to OUT/goodput.png; then the run
checks its own output (every mode ran, the failure schedules identical across modes and carried
out, goodput within [0, 1.05], failures in every failing row, async goodput at least rigid
goodput at the highest rate) and exits 1 when one fails. Speed is never checked.

  benchmarks/fleet/goodput.py --build=BUILD [--quick] [--out=DIR] [--workers=8,16,32]
      [--rates=0,0.1,0.3,1,3] [--duration=30] [--recovery=5] [--detect=2] [--seed=1]
      [--modes=async,rigid,elastic]

--rates: fleet failures per round (one round = H x step time); a learner's mean time to failure is
M = N x round / rate (rate 0: M = infinity, no failures).
"""
import argparse
import atexit
import datetime
import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
FRAGMENTS = 8
SHARDS = 2
MODES = ["async", "rigid", "elastic"]
UNBOUNDED = "600s"  # rigid: no round closes, no worker stops counting, within a run


def seconds(d):
    return float(d[:-2]) / 1000 if d.endswith("ms") else float(d.rstrip("s"))


def schedule(seed, n, rate, mttf, duration, recovery, who):
    """Failure times (s after the window opens) of `who` (e.g. "w3"): exponential times to
    failure of mean `mttf`, each followed by `recovery` s down. The same for every mode."""
    if rate <= 0:
        return []
    rng = random.Random(f"{seed}/{n}/{rate}/{who}")
    out, t = [], 0.0
    while True:
        t += rng.expovariate(1.0 / mttf)
        if t >= duration:
            return out
        out.append(round(t, 3))
        t += recovery


def mode_flags(mode, n, detect):
    """(shard flags, learner flags) of a mode."""
    if mode == "async":
        return [], []
    if mode == "rigid":
        shard = [f"--worker_timeout={UNBOUNDED}"]
    else:
        shard = [f"--worker_timeout={detect}s", "--elastic_quorum"]
    return ([f"--quorum={n}", f"--grace_cap={UNBOUNDED}"] + shard, ["--lockstep", "--stream=false"])


class Row:
    """One run: a mode, N learners, a failure rate."""

    def __init__(self, a, run_dir, mode, n, rate, plan, shard_plan):
        self.a, self.run_dir, self.mode, self.n, self.rate = a, run_dir, mode, n, rate
        self.plan, self.shard_plan = plan, shard_plan
        shard_extra, self.worker_extra = mode_flags(mode, n, a.detect)
        if shard_plan:
            shard_extra = shard_extra + ["--durability=per-round"]
        self.shards = []
        for i in range(SHARDS):
            s = cluster.Shard(a.build, run_dir, i, SHARDS, a.model, FRAGMENTS, shard_extra)
            s.audit = os.path.join(run_dir, f"audit{i}.jsonl")
            s.argv.append(f"--audit_jsonl={s.audit}")
            s.audits = [s.audit]
            self.shards.append(s)
        self.incarnations = {w: [] for w in range(n)}  # wid -> [Worker], oldest first
        self.killed = []  # processes killed on purpose
        self.executed = []  # (what, who, scheduled s, done s)

    def members(self):
        return self.shards + [w for inc in self.incarnations.values() for w in inc]

    def start_worker(self, wid):
        k = len(self.incarnations[wid])
        eps = [s.endpoint for s in self.shards]
        w = cluster.Worker(self.a.build, self.run_dir, wid, self.n, eps, self.a.model, FRAGMENTS,
                           "int8", self.a.inner_steps, self.a.step_time,
                           self.worker_extra + [f"--generation={k + 1}", "--log_sync_events",
                                                "--progress_interval=250ms",
                                                f"--duration={self.a.duration + 600}s"])
        if k:
            cluster.renamed(w, f"g{k + 1}", "--metrics_jsonl", "jsonl")
        w.generation = k + 1
        w.killed = False
        self.incarnations[wid].append(w)
        w.start()
        return w

    def check_alive(self):
        crash = cluster.first_crash(self.members(), self.killed)
        if crash:
            raise RuntimeError(crash)

    def kill(self, proc):
        self.killed.append(proc)
        proc.kill()
        proc.wait()

    def run(self):
        a = self.a
        for s in self.shards:
            s.start()
        files = {}
        for wid in range(self.n):  # every incarnation's file, known in advance from the plan
            for k in range(len(self.plan[wid]) + 1):
                suffix = f".g{k + 1}" if k else ""
                files[(wid, k + 1)] = os.path.join(self.run_dir, f"worker{wid}{suffix}.jsonl")
        self.follow = cluster.Follower(files)
        for wid in range(self.n):
            self.start_worker(wid)
        cluster.wait_training([inc[0] for inc in self.incarnations.values()], 120 + 5 * self.n)
        self.t0 = self.follow.now()
        actions = []
        for wid, times in self.plan.items():
            for t in times:
                actions += [(t, 0, "kill", wid), (t + a.recovery, 1, "start", wid)]
        for idx, times in self.shard_plan.items():
            for t in times:
                actions += [(t, 0, "kill_shard", idx),
                            (t + a.shard_recovery, 1, "start_shard", idx)]
        actions.sort()
        end = a.duration + 0.5  # step counts at the window's end are read from after it
        for t, _, what, who in actions + [(end, 2, "end", None)]:
            while self.follow.now() - self.t0 < t:
                self.check_alive()
                time.sleep(min(0.05, max(0.0, t - (self.follow.now() - self.t0))))
            self.check_alive()
            if what == "end":
                break
            if what == "kill":
                w = self.incarnations[who][-1]
                w.killed = True
                self.kill(w.proc)
            elif what == "start":
                self.start_worker(who)
            elif what == "kill_shard":
                self.kill(self.shards[who].proc)
            elif what == "start_shard":
                s = self.shards[who]
                cluster.renamed(s, f"i{len(s.audits) + 1}", "--audit_jsonl", "audit")
                s.audits.append(s.audit)
                s.start()
            self.executed.append((what, who, t, round(self.follow.now() - self.t0, 3)))
        # Every learner still up stops here (killed: see the docstring); the shards must stop
        # cleanly.
        survivors = [inc[-1] for inc in self.incarnations.values() if not inc[-1].killed]
        for w in survivors:
            self.kill(w.proc)
        cluster.stop([s.proc for s in self.shards], 120)
        self.follow.close()
        cluster.check_exits(self.shards, self.killed)

    def measure(self, r0):
        """The row's figures from the learners' and shards' own logs."""
        a = self.a
        t_open, t_close = self.t0, self.t0 + a.duration
        applied = {}  # (worker, generation, fragment) -> steps of its applied pushes
        applied_keys = set()
        for s in self.shards:
            for path in s.audits:
                for e in cluster.read_events(path):
                    if e.get("event") != "applied":
                        continue
                    key = (e["worker"], e["generation"], e["fragment"])
                    applied[key] = applied.get(key, 0) + e["steps"]
                    applied_keys.add(key + (e["seq"],))
        progress = {}
        for t, key, e in self.follow.events():
            if e.get("event") == "progress":
                progress.setdefault(key, []).append((t, e))
        useful = 0.0
        steps_in_window = 0.0
        pushes = lost_pushes = 0
        tokens_per_step = None
        for wid, incs in self.incarnations.items():
            for w in incs:
                pts = steps_at(progress.get((wid, w.generation), []))
                if tokens_per_step is None:
                    tokens_per_step = next((e["tokens"] / e["step"] for _, e in
                                            progress.get((wid, w.generation), []) if e["step"]),
                                           None)
                events = cluster.read_events(w.jsonl)
                last_push = {}
                for e in events:
                    if e.get("event") == "push":
                        last_push[e["fragment"]] = e["seq"]
                lost_steps = 0
                for e in events:
                    kind = e.get("event")
                    if kind == "reanchor":
                        lost_steps += e["steps"]
                    if kind != "push":
                        continue
                    done = (wid, w.generation, e["fragment"], e["seq"]) in applied_keys
                    in_flight = not w.killed and last_push[e["fragment"]] == e["seq"]
                    if in_flight and not done:
                        continue  # a survivor's last push: it would reach the model
                    pushes += 1
                    if not done:
                        lost_pushes += 1
                        lost_steps += e["steps"]
                if w.killed:
                    got = sum(applied.get((wid, w.generation, f), 0) for f in range(FRAGMENTS))
                    useful += got / FRAGMENTS
                else:
                    useful += interpolate(pts, t_close) - lost_steps / FRAGMENTS
                first = w is incs[0]
                start = interpolate(pts, t_open) if first else 0.0
                stop = interpolate(pts, t_close) if not w.killed else pts[-1][1] if pts else 0
                steps_in_window += stop - start
                if first:
                    useful -= start  # work done before the window opened
        window = a.duration
        per_learner = steps_in_window / (self.n * window)
        worker_kills = sum(1 for x in self.executed if x[0] == "kill")
        shard_kills = sum(1 for x in self.executed if x[0] == "kill_shard")
        round_s = a.inner_steps * seconds(a.step_time)
        row = {
            "mode": self.mode, "workers": self.n, "shards": SHARDS, "model": a.model,
            "fragments": FRAGMENTS, "H": a.inner_steps, "step_time": a.step_time,
            "round_s": round_s, "rate_per_round": self.rate,
            "mttf_s": self.n * round_s / self.rate if self.rate else None,
            "recovery_s": a.recovery, "detect_s": a.detect if self.mode == "elastic" else None,
            "seed": a.seed, "window_s": window,
            "schedule": {str(k): v for k, v in self.plan.items()},
            "shard_schedule": {str(k): v for k, v in self.shard_plan.items()},
            "worker_kills": worker_kills, "shard_kills": shard_kills,
            "failures_per_round": worker_kills * round_s / window,
            "executed": self.executed,
            "steps_per_learner_s": per_learner, "useful_steps": useful,
            "pushes": pushes, "lost_pushes": lost_pushes,
            "lost_push_fraction": lost_pushes / pushes if pushes else None,
            "tokens_per_step": tokens_per_step,
        }
        row["useful_tokens_per_s"] = useful * (tokens_per_step or 0) / window
        if r0 is None and self.mode == "async" and not self.rate:
            r0 = per_learner  # this row is the reference
        row["r0_steps_per_s"] = r0
        row["goodput"] = useful / (self.n * window * r0) if r0 else None
        return row


def steps_at(events):
    """(time, step) points of one learner's progress: the event's own elapsed_s placed on the
    bench clock (its start: the earliest stamp less elapsed, the follower's polling delay out),
    from (start, 0)."""
    if not events:
        return []
    start = min(t - e["elapsed_s"] for t, e in events)
    return [(start, 0)] + [(start + e["elapsed_s"], e["step"]) for _, e in events]


def interpolate(pts, t):
    if not pts or t <= pts[0][0]:
        return 0.0
    for (t1, s1), (t2, s2) in zip(pts, pts[1:]):
        if t1 <= t <= t2:
            return s1 + (s2 - s1) * (t - t1) / (t2 - t1) if t2 > t1 else s2
    return float(pts[-1][1])


def run_row(a, out, mode, n, rate, r0):
    round_s = a.inner_steps * seconds(a.step_time)
    mttf = n * round_s / rate if rate else math.inf
    plan = {w: schedule(a.seed, n, rate, mttf, a.duration, a.recovery, f"w{w}")
            for w in range(n)}
    shard_plan = {}
    if a.shard_failures and rate:
        shard_plan = {i: schedule(a.seed, n, rate, a.shard_mttf, a.duration, a.shard_recovery,
                                  f"s{i}") for i in range(SHARDS)}
    run_dir = os.path.join(out, "runs", f"{mode}-n{n}-r{rate}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    row = Row(a, run_dir, mode, n, rate, plan, shard_plan)
    try:
        row.run()
    finally:
        cluster.stop_all()
    r = row.measure(r0)
    r["logs"] = run_dir
    return r


def check(rows, a):
    """What is wrong with the run's output: [] when nothing."""
    bad = []
    for n in a.workers:
        for rate in a.rates:
            got = {r["mode"]: r for r in rows if r["workers"] == n and r["rate_per_round"] == rate}
            if sorted(got) != sorted(a.modes):
                bad.append(f"N={n} rate {rate}: modes {sorted(got)}, expected {a.modes}")
                continue
            plans = {json.dumps([r["schedule"], r["shard_schedule"]]) for r in got.values()}
            if len(plans) != 1:
                bad.append(f"N={n} rate {rate}: the failure schedules differ across modes")
            for m, r in got.items():
                planned = sum(len(v) for v in r["schedule"].values())
                if r["worker_kills"] != planned:
                    bad.append(f"{m} N={n} rate {rate}: {r['worker_kills']} learners killed, "
                               f"{planned} planned")
                if rate and not r["worker_kills"]:
                    bad.append(f"{m} N={n} rate {rate}: no failure happened")
                g = r["goodput"]
                if g is None or not math.isfinite(g) or not 0 <= g <= 1.05:
                    bad.append(f"{m} N={n} rate {rate}: goodput {g} outside [0, 1.05]")
        top = max(a.rates)
        got = {r["mode"]: r for r in rows if r["workers"] == n and r["rate_per_round"] == top}
        if top and {"async", "rigid"} <= set(got):
            ga, gr = got["async"]["goodput"], got["rigid"]["goodput"]
            if ga is not None and gr is not None and ga < gr:
                bad.append(f"N={n} rate {top}: async goodput {ga:.3f} below rigid {gr:.3f}")
    return bad


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"async": "tab:green", "rigid": "tab:red", "elastic": "tab:orange"}
    markers = ["o", "s", "^", "D"]
    ns = sorted({r["workers"] for r in rows})
    for i, n in enumerate(ns):
        for m in [m for m in MODES if any(r["mode"] == m for r in rows)]:
            pts = sorted((r["failures_per_round"], r["goodput"]) for r in rows
                         if r["workers"] == n and r["mode"] == m and r["goodput"] is not None)
            ax.plot(*zip(*pts), marker=markers[i % 4], color=colors[m], label=f"{m}, N={n}")
        for m, style in (("rigid", "-"), ("elastic", "--")):
            pairs = []
            for r in rows:
                if r["workers"] != n or r["mode"] != "async" or not r["rate_per_round"]:
                    continue
                s = next((x for x in rows if x["workers"] == n and x["mode"] == m and
                          x["rate_per_round"] == r["rate_per_round"]), None)
                if s and s["goodput"]:
                    pairs.append((r["failures_per_round"], r["goodput"] / s["goodput"]))
            if pairs:
                bx.plot(*zip(*sorted(pairs)), style, marker=markers[i % 4], color=colors[m],
                        label=f"async / {m}, N={n}")
    ax.axhline(0.88, color="tab:green", lw=0.8, ls=":", label="paper: decoupled 88%")
    ax.axhline(0.27, color="tab:red", lw=0.8, ls=":", label="paper: synchronous 27%")
    for x in (ax, bx):
        x.set_xscale("symlog", linthresh=0.1)
        x.set_xlabel("learner failures per round, fleet-wide (measured)")
        x.grid(alpha=0.3)
    ax.set_ylabel("goodput (useful learner-steps / ideal)")
    ax.set_ylim(0, 1.1)
    bx.set_yscale("log")
    bx.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    bx.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    bx.set_ylabel("goodput ratio")
    ax.legend(fontsize=6, ncol=2)
    bx.legend(fontsize=7)
    ax.set_title("Goodput under learner failures")
    bx.set_title("Asynchronous over synchronous")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(rows):
    L = ["| N | failures/round (planned) | M s | measured | mode | goodput | useful tokens/s | "
         "pushes lost | steps/s per learner |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = "-" if r["goodput"] is None else f"{r['goodput']:.3f}"
        lost = "-" if r["lost_push_fraction"] is None else f"{r['lost_push_fraction']:.3f}"
        mttf = "inf" if r["mttf_s"] is None else f"{r['mttf_s']:.1f}"
        L.append(f"| {r['workers']} | {r['rate_per_round']} | {mttf} | "
                 f"{r['failures_per_round']:.2f} ({r['worker_kills']} kills) | {r['mode']} | "
                 f"{g} | {r['useful_tokens_per_s']:.0f} | {lost} | "
                 f"{r['steps_per_learner_s']:.2f} |")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/dev"))
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true",
                    help="N=4, rates 0 and 1, 15 s windows: about 2 minutes")
    ap.add_argument("--workers", default="8,16,32")
    ap.add_argument("--rates", default="0,0.1,0.3,1,3")
    ap.add_argument("--duration", type=float, default=30.0, help="window of each row, s")
    ap.add_argument("--recovery", type=float, default=5.0, help="a failed learner's downtime, s")
    ap.add_argument("--detect", type=float, default=2.0,
                    help="elastic: the shards' --worker_timeout, s")
    ap.add_argument("--shard_failures", action="store_true",
                    help="shards fail too (mean --shard_mttf, down --shard_recovery)")
    ap.add_argument("--shard_mttf", type=float, default=20.0)
    ap.add_argument("--shard_recovery", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1,
                    help="the failure schedules' seed: rows of one seed share their failure times")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="which of async, rigid, elastic to run (async always: its row at rate "
                         "0 is r0)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--step_time", default="50ms")
    ap.add_argument("--inner_steps", type=int, default=20)
    ap.add_argument("--keep_logs", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.workers, a.rates, a.duration = "4", "0,1", 15.0
    a.workers = [int(x) for x in a.workers.split(",")]
    a.rates = sorted(float(x) for x in a.rates.split(","))
    a.modes = [m for m in a.modes.split(",") if m]
    if "async" not in a.modes or not set(a.modes) <= set(MODES) or \
            len(set(a.modes)) != len(a.modes):
        print(f"goodput: --modes={','.join(a.modes)}: a subset of {','.join(MODES)} with async "
              "(its row at rate 0 is r0), each once", file=sys.stderr)
        return 2
    a.modes = [m for m in MODES if m in a.modes]
    if a.rates[0] != 0:
        print("goodput: --rates needs 0 (the reference rate r0)", file=sys.stderr)
        return 2
    a.build = os.path.abspath(a.build)
    for b in ("server/diloco-server", "worker/diloco-worker", "ctl/diloco-ctl"):
        if not os.access(os.path.join(a.build, b), os.X_OK):
            print(f"goodput: missing {a.build}/{b} (build first, or --build=DIR)", file=sys.stderr)
            return 2
    out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="diloco-goodput."))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="diloco-goodput-runs.")
    atexit.register(cluster.stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_start = time.monotonic()
    command = " ".join(["benchmarks/fleet/goodput.py"] + sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    rows_path = os.path.join(out, "goodput_rows.jsonl")
    with open(rows_path, "w") as fh:
        for n in a.workers:
            r0 = None
            for rate in a.rates:
                for mode in a.modes:
                    try:
                        r = run_row(a, work, mode, n, rate, r0)
                    except (RuntimeError, OSError, ValueError) as e:
                        print(f"goodput: {mode} N={n} rate {rate}: {e} (logs: {work})",
                              file=sys.stderr)
                        return 1
                    if r0 is None:
                        r0 = r["r0_steps_per_s"]
                    r.update({"command": command, "started": started,
                              "load_at_start": os.getloadavg()[0]})
                    rows.append(r)
                    fh.write(json.dumps(r) + "\n")
                    fh.flush()
                    g = "-" if r["goodput"] is None else f"{r['goodput']:.3f}"
                    print(f"[{time.monotonic() - t_start:5.0f} s] N={n} rate {rate} {mode}: "
                          f"{r['worker_kills']} kills, goodput {g}, pushes lost "
                          f"{r['lost_pushes']}/{r['pushes']}", flush=True)
    with open(rows_path) as fh:
        rows = [json.loads(line) for line in fh]  # the plot and checks from what was written
    plot(rows, os.path.join(out, "goodput.png"))
    print(table(rows))
    bad = check(rows, a)
    if not os.path.getsize(os.path.join(out, "goodput.png")):
        bad.append("goodput.png is empty")
    for b in bad:
        print(f"goodput: {b}")
    print(f"[{time.monotonic() - t_start:5.0f} s] {'FAILED' if bad else 'done'}: {rows_path}")
    if not bad and not a.keep_logs:
        shutil.rmtree(work, ignore_errors=True)
        if not a.out:  # a temporary output (ctest): the table above is what stays
            shutil.rmtree(out, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
