"""The measurements of diloco-bench, one function per kind of row. Each starts its own shards and
synthetic learners in a folder of its own under the output, measures, stops them all, and returns
a dict of plain numbers (None where a figure was not reported).

  throughput   the full path under more load than it can take (learners of 10 ms steps and
               H = 10): rounds/s, parameters merged/s, wire bytes per parameter per round, the
               shards' resident bytes and CPU per parameter, over a window of steady state taken
               from the shards' own counters (diloco-ctl stats before and after).
  utilization  learners of a realistic step time and H: the share of their wall time spent in
               steps, against the same learners without sync (the ceiling).
  failure      kill -9 of one learner and of one shard (restarted from its store on the same
               endpoint), with every survivor's step rate and every shard's rounds over time.
"""
import math
import shutil
import statistics
import subprocess
import time

import cluster

STEP_TIME_THROUGHPUT, H_THROUGHPUT = "10ms", 10
FRAGMENTS = 8


def gpt_params(spec):
    """Parameters of a GPT spec or preset (common/model_spec.cc's manifest)."""
    presets = {"tiny": "L=2", "small": "L=4,C=128,T=128", "gpt2-124m": "L=12,C=768,T=1024,V=50257",
               "gpt2-350m": "L=24,C=1024,T=1024,V=50257"}
    c = {"L": 2, "C": 64, "T": 64, "V": 256}
    for kv in presets.get(spec, spec).split(","):
        k, v = kv.split("=")
        c[k] = int(v)
    L, C = c["L"], c["C"]
    return c["V"] * C + c["T"] * C + L * (12 * C * C + 13 * C) + 2 * C


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fits(params, workers, sync):
    """(fits, bytes needed): a synced learner holds ~17 B/param (4 parameters, 12 sync state,
    ~1 encoded pushes), an unsynced one 4, the shards 12.5 together; 10% left over."""
    need = params * (workers * (17 if sync else 4) + (12.5 if sync else 0))
    return need * 1.1 < mem_available(), need


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _max(xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def _done_figures(workers):
    """What the learners' done events say, pooled: utilization, push-to-adoption latency
    (median of their p50s, the largest p99), download counts."""
    done = [cluster.last_event(w.jsonl, "done") or {} for w in workers]
    util = [d.get("utilization") for d in done]
    return {
        "done_events": sum(1 for d in done if d),
        "utilization": _median(util),
        "utilization_min": min((u for u in util if u is not None), default=None),
        "push_to_adopt_p50_ms": _median([d.get("push_to_adopt_p50_ms") for d in done]),
        "push_to_adopt_p99_ms": _max([d.get("push_to_adopt_p99_ms") for d in done]),
        "applied": sum(d.get("applied", 0) for d in done),
        "updates_full": sum(d.get("updates_full", 0) for d in done),
        "updates_delta": sum(d.get("updates_delta", 0) for d in done),
        "download_mismatches": sum(d.get("download_mismatches", 0) for d in done),
        "worker_resident_b_per_param": _max([d.get("resident_bytes_per_param") for d in done]),
    }


def _start_shards(ctx, run_dir, n, model, extra):
    shards = [cluster.Shard(ctx.build, run_dir, i, n, model, FRAGMENTS, extra) for i in range(n)]
    for s in shards:
        s.start()
    return shards


def _start_workers(ctx, run_dir, n, shards, model, codec, h, step_time, extra):
    eps = [s.endpoint for s in shards] if shards else None
    workers = [cluster.Worker(ctx.build, run_dir, i, n, eps, model, FRAGMENTS, codec, h,
                              step_time, extra) for i in range(n)]
    for w in workers:
        w.start()
    return workers


def _stop(workers, shards, killed=()):
    """Stops the run's processes (SIGTERM: each must exit 0) and fails it (RuntimeError, with the
    process's status and log tail) on any that crashed, except `killed`: those killed on
    purpose."""
    cluster.stop([w.proc for w in workers], 60)  # each drains: its pushes answered
    cluster.stop([s.proc for s in shards], 180)  # a large model's final checkpoint takes a while
    for s in shards:  # the logs stay; the stores (8 B/param each) go
        shutil.rmtree(s.store, ignore_errors=True)
    cluster.check_exits(list(workers) + list(shards), killed)


def _error(e, run_dir, workers, shards, killed=()):
    """A failed row's error: a process that crashed meanwhile first (the failure's likely cause),
    then what failed."""
    crash = cluster.first_crash(list(workers) + list(shards), killed)
    if crash and crash not in str(e):
        return f"{crash}\n  (then: {e}) (logs: {run_dir})"
    return f"{e} (logs: {run_dir})"


def _snapshot(shards, workers):
    return {"t": time.monotonic(), "stats": [s.stats() for s in shards],
            "shard_cpu": sum(cluster.cpu_seconds(s.proc) for s in shards),
            "worker_cpu": sum(cluster.cpu_seconds(w.proc) for w in workers)}


def _ratio(a, b):
    return a / b if b else math.nan


def throughput(ctx, model, shards_n, workers_n, codec, dcodec, warm_s, window_s):
    params = gpt_params(model)
    row = {"kind": "throughput", "model": model, "params": params, "shards": shards_n,
           "workers": workers_n, "codec": codec, "download_codec": dcodec,
           "step_time": STEP_TIME_THROUGHPUT, "H": H_THROUGHPUT, "fragments": FRAGMENTS}
    ok, need = fits(params, workers_n, True)
    if not ok:
        row["skipped"] = (f"needs ~{need / 2**30:.0f} GiB, {mem_available() / 2**30:.0f} GiB "
                          "available")
        return row
    run_dir = ctx.run_dir(f"tp-{model_label(model)}-s{shards_n}-w{workers_n}-{codec}-{dcodec}")
    extra = [f"--download_codec={dcodec}"] if ctx.download_flag else []
    shards, workers = [], []
    try:
        shards = _start_shards(ctx, run_dir, shards_n, model, extra)
        workers = _start_workers(ctx, run_dir, workers_n, shards, model, codec, H_THROUGHPUT,
                                 STEP_TIME_THROUGHPUT, ["--duration=1800s"])
        # A large model's join takes minutes on a busy box (355M: 150 s at load 5-7).
        cluster.wait_training(workers, 120 + workers_n * params / 1e6)
        time.sleep(warm_s)
        a = _snapshot(shards, workers)
        time.sleep(window_s)
        b = _snapshot(shards, workers)
        _stop(workers, shards)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        row["error"] = _error(e, run_dir, workers, shards)
        return row
    finally:
        cluster.stop_all()
    dt = b["t"] - a["t"]

    def delta(key, sub=None):
        get = (lambda s: s[key][sub]) if sub else (lambda s: s[key])
        return sum(get(y) - get(x) for x, y in zip(a["stats"], b["stats"]))

    numel = sum(s["params"] for s in b["stats"])
    frag = numel / FRAGMENTS
    rounds, pushes = delta("rounds"), delta("pushes", "queued")
    bytes_in, bytes_out = delta("bytes_in"), delta("bytes_out")
    merged = pushes * frag
    row.update({
        "params": numel, "window_s": dt, "rounds": rounds, "pushes": pushes,
        "rounds_per_s": rounds / dt, "params_merged_per_s": merged / dt,
        "pushes_per_round": _ratio(pushes, rounds),
        "up_b_per_param_round": _ratio(bytes_in, rounds * frag),
        "down_b_per_param_round": _ratio(bytes_out, rounds * frag),
        "up_b_per_param_push": _ratio(bytes_in, merged),
        "wire_gbps": (bytes_in + bytes_out) / dt / 1e9,
        "merged_fp32_gbps": merged * 4 / dt / 1e9,
        "shard_resident_b_per_param": sum(s["resident_bytes"] for s in b["stats"]) / numel,
        "shard_cpu_ns_per_param": _ratio((b["shard_cpu"] - a["shard_cpu"]) * 1e9, merged),
        "worker_cores": (b["worker_cpu"] - a["worker_cpu"]) / dt,
        "shard_cores": (b["shard_cpu"] - a["shard_cpu"]) / dt,
        "wall_ns_per_param": _ratio(dt * 1e9, merged),
    })
    row["wire_ratio_zmq"] = row["wire_gbps"] / ctx.ceilings["zmq_raw_gbps"]
    row["merged_ratio_memcpy"] = row["merged_fp32_gbps"] / ctx.ceilings["memcpy_gbps"]
    row.update(_done_figures(workers))
    return row


def utilization(ctx, model, shards_n, workers_n, h, codec, step_time, duration_s, sync=True):
    params = gpt_params(model)
    dcodec = ("int8" if ctx.download_flag else "fp32") if sync else "-"
    row = {"kind": "utilization", "link": "loopback" if sync else "none",
           "model": model, "params": params, "shards": shards_n if sync else 0,
           "workers": workers_n, "H": h, "codec": codec if sync else "-",
           "download_codec": dcodec, "step_time": step_time, "duration_s": duration_s}
    ok, need = fits(params, workers_n, sync)
    if not ok:
        row["skipped"] = (f"needs ~{need / 2**30:.0f} GiB, {mem_available() / 2**30:.0f} GiB "
                          "available")
        return row
    name = f"util-{model_label(model)}-w{workers_n}-H{h}-{codec if sync else 'nosync'}"
    run_dir = ctx.run_dir(name)
    shards, workers = [], []
    try:
        extra = [f"--download_codec={dcodec}"] if sync and ctx.download_flag else []
        shards = _start_shards(ctx, run_dir, shards_n, model, extra) if sync else []
        workers = _start_workers(ctx, run_dir, workers_n, shards, model,
                                 codec if sync else "int8", h, step_time,
                                 [f"--duration={duration_s}s"])
        end = time.monotonic() + duration_s + 300 + workers_n * params / 2e6
        while time.monotonic() < end and any(w.proc.poll() is None for w in workers):
            time.sleep(0.5)
        _stop(workers, shards)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        row["error"] = _error(e, run_dir, workers, shards)
        return row
    finally:
        cluster.stop_all()
    row.update(_done_figures(workers))
    return row


def model_label(model):
    n = gpt_params(model)
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def _rates(events):
    """(start, end, steps/s) per progress interval of one learner."""
    out, prev = [], None
    for t, e in events:
        if prev and e["elapsed_s"] > prev[1]["elapsed_s"]:
            rate = (e["step"] - prev[1]["step"]) / (e["elapsed_s"] - prev[1]["elapsed_s"])
            out.append((prev[0], t, rate))
        prev = (t, e)
    return out


def _round_rates(events):
    """(time, rounds closed, rounds/s) per progress interval of one shard. A restart starts its
    counters again (a new incarnation): the interval across the downtime has its rounds (those
    since the restart) but no rate (None, a gap in the plot)."""
    out, prev = [], None
    for t, e in events:
        s = e["stats"]
        if prev and s["incarnation"] == prev[1]["incarnation"]:
            n = s["rounds"] - prev[1]["rounds"]
            out.append((t, n, n / max(t - prev[0], 1e-3)))
        elif prev:
            out.append((t, s["rounds"], None))
        prev = (t, s)
    return out


def failure(ctx, model, workers_n, h, step_time, duration_s, kill_worker_at, kill_shard_at,
            down_s, slow_fraction=0.5):
    run_dir = ctx.run_dir("failure")
    shards, workers = [], []
    victim_w, victim_s = workers_n - 1, 1
    killed = []  # processes killed on purpose
    try:
        shards = _start_shards(ctx, run_dir, 2, model, ["--durability=per-round"])
        workers = _start_workers(ctx, run_dir, workers_n, shards, model, "int8", h, step_time,
                                 ["--duration=1800s"])
        files = {f"w{w.wid}": w.jsonl for w in workers}
        files.update({f"s{s.index}": s.jsonl for s in shards})
        follow = cluster.Follower(files)
        cluster.wait_training(workers, 120)
        t0 = follow.now()

        def at(t):
            time.sleep(max(0, t0 + t - follow.now()))

        at(kill_worker_at)
        workers[victim_w].proc.kill()
        killed.append(workers[victim_w].proc)
        at(kill_shard_at)
        shards[victim_s].proc.kill()
        killed.append(shards[victim_s].proc)
        shards[victim_s].proc.wait()
        at(kill_shard_at + down_s)
        shards[victim_s].start()
        restarted = follow.now() - t0
        at(duration_s)
        # Exempt: the processes killed above on purpose (the shard runs again, restarted).
        _stop(workers, shards, killed=killed)
        follow.close()
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        return {"kind": "failure", "workers": workers_n,
                "error": _error(e, run_dir, workers, shards, killed)}
    finally:
        cluster.stop_all()
    events = [(t - t0, k, e) for t, k, e in follow.events() if e.get("event") == "progress"]
    series = {k: [(t, e) for t, kk, e in events if kk == k] for k in files}
    down = (kill_shard_at, restarted)
    survivors = []
    for w in workers:
        rates = _rates(series[f"w{w.wid}"])
        if w.wid == victim_w:
            continue
        med = statistics.median(r for _, _, r in rates) if rates else 0
        # The longest run of consecutive intervals below slow_fraction of the median, in s.
        longest = run = 0.0
        for t1, t2, r in rates:
            run = run + (t2 - t1) if r < slow_fraction * med else 0.0
            longest = max(longest, run)
        survivors.append({"worker": w.wid, "median_steps_per_s": med,
                          "min_ratio": min(r for _, _, r in rates) / med if med else 0,
                          "longest_slow_s": longest})
    shard_rates = {s.index: _round_rates(series[f"s{s.index}"]) for s in shards}
    during = sum(n for t, n, _ in shard_rates[0] if down[0] < t <= down[1])
    after = sum(n for t, n, _ in shard_rates[victim_s] if t > down[1])
    done = [cluster.last_event(w.jsonl, "done") or {} for w in workers if w.wid != victim_w]
    last = [cluster.last_event(w.jsonl, "progress") or {} for w in workers if w.wid != victim_w]
    stalled = any(s["longest_slow_s"] > down_s for s in survivors)
    result = {
        "kind": "failure", "model": model, "workers": workers_n, "shards": 2, "H": h,
        "step_time": step_time, "duration_s": duration_s, "killed_worker": victim_w,
        "worker_killed_at_s": kill_worker_at, "killed_shard": victim_s,
        "shard_killed_at_s": kill_shard_at, "shard_restarted_at_s": restarted,
        "shard_downtime_s": restarted - kill_shard_at, "slow_fraction": slow_fraction,
        "survivors": survivors, "stalled": stalled,
        "shard0_rounds_while_shard1_down": during, "shard1_rounds_after_restart": after,
        "survivors_saw_restart": sum(1 for p in last if p.get("shard_restarts", 0) > 0),
        "survivors_done": sum(1 for d in done if d),
        "worker_rates": {w.wid: _rates(series[f"w{w.wid}"]) for w in workers},
        "shard_round_rates": shard_rates,
    }
    return result
