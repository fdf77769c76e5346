"""WAN emulation harness (docs/wan.md): emulated links (wan_net.sh) and fleets run across them.

Used by wan_rows (the measured rows) and wan_test.py (the ctest). Every process started here is
tracked and stopped by its PID, and every set of namespaces is torn down, on success, failure or
SIGTERM/SIGINT alike.
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NET = os.path.join(HERE, "wan_net.sh")
SHARD_IP = "10.201.0.2"

# name: (rate Mbit/s, RTT ms). Jitter and loss: see Wan's defaults.
PROFILES = {
    "1g-50ms": (1000, 50),
    "100m-150ms": (100, 150),
    "10g-20ms": (10000, 20),
}


class Stop(Exception):
    """SIGTERM or SIGINT: unwinds through every cleanup."""


def _on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def install_signal_handlers():
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def support():
    """None when this machine can emulate links (root, netns, veth, tbf, TUN); else why not."""
    r = subprocess.run([NET, "check"], capture_output=True, text=True, timeout=30)
    if r.returncode == 0:
        return None
    lines = (r.stdout + r.stderr).strip().splitlines()
    return lines[-1].removeprefix("skipped: ") if lines else f"wan_net.sh check: rc {r.returncode}"


class Wan:
    """Namespaces <prefix>-s (shards), <prefix>-w<i> (worker i), <prefix>-x (the path).

    A context manager: the links are up inside the `with`, torn down on leaving it.
    """

    _count = 0

    def __init__(self, build, workers, rate_mbit, rtt_ms, jitter_ms=None, loss=1e-4,
                 tcp_buffers="kernel", seed=1):
        Wan._count += 1
        self.prefix = f"w{os.getpid() % 100000}n{Wan._count}"[:10]
        self.workers = workers
        self.rate_mbit, self.rtt_ms = rate_mbit, rtt_ms
        # Jitter: 5% of the one-way delay by default (a path's queueing variation).
        self.jitter_ms = rtt_ms / 2 * 0.05 if jitter_ms is None else jitter_ms
        self.loss = loss
        self.args = [
            f"--prefix={self.prefix}", f"--workers={workers}", f"--rate_mbit={rate_mbit}",
            f"--rtt_ms={rtt_ms}", f"--jitter_ms={self.jitter_ms}", f"--loss={loss}",
            f"--tcp_buffers={tcp_buffers}", f"--seed={seed}",
            f"--delay_bin={os.path.join(build, 'benchmarks/wan/diloco-wan-delay')}",
        ]
        self.state = f"/tmp/wan-net.{self.prefix}"
        self._stats = None

    def __enter__(self):
        try:
            subprocess.run([NET, "up"] + self.args, check=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def down(self):
        subprocess.run([NET, "down", f"--prefix={self.prefix}"], timeout=60,
                       stdin=subprocess.DEVNULL)
        try:  # the delayer writes its counts when it stops
            with open(os.path.join(self.state, "delay.stats.json")) as f:
                self._stats = json.loads(f.read())
        except (OSError, ValueError):
            self._stats = None
        shutil.rmtree(self.state, ignore_errors=True)

    def shard_ns(self):
        return f"{self.prefix}-s"

    def worker_ns(self, i):
        return f"{self.prefix}-w{i}"

    def delay_stats(self):
        """The delayer's counts: packets, bytes, dropped, the most bytes held at once (read
        after leaving the `with`; None if it wrote none)."""
        return self._stats


class Procs:
    """Processes started by this harness, stopped by PID (TERM, then KILL) on leaving."""

    def __init__(self):
        self.procs = []

    def __enter__(self):
        return self

    def start(self, ns, argv, log_path):
        cmd = (["ip", "netns", "exec", ns] if ns else []) + argv
        with open(log_path, "wb") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self, p, grace_s=15):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        return False


def synthetic_learner(build):
    """True when diloco-worker has --device=synthetic (a learner whose step is a timed wait)."""
    r = subprocess.run([os.path.join(build, "worker/diloco-worker"), "--helpfull"],
                       capture_output=True, text=True, timeout=30)
    return "synthetic_step_time" in (r.stdout + r.stderr)


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


class Fleet:
    """What one fleet run is: its model, learners, round settings and duration."""

    def __init__(self, model, fragments, codec, H, workers, shards, duration_s, step_ms,
                 synthetic, server_flagfile=None, download_codec="fp32", extra_worker=(),
                 extra_server=()):
        self.model, self.fragments, self.codec, self.H = model, fragments, codec, H
        self.download_codec = download_codec
        self.workers, self.shards, self.duration_s = workers, shards, duration_s
        self.step_ms, self.synthetic = step_ms, synthetic
        self.server_flagfile = server_flagfile
        self.extra_worker, self.extra_server = list(extra_worker), list(extra_server)

    def learner_flags(self):
        if self.synthetic:
            return ["--device=synthetic", f"--synthetic_step_time={self.step_ms}ms"]
        # The real model on this CPU, each step padded to the GPU-like step time.
        return [f"--step_delay={self.step_ms}ms", "--batch=1", "--seq_len=16", "--threads=1",
                "--eval_batches=1"]


def run_fleet(build, out_dir, fleet, wan=None, join_timeout_s=300):
    """Shards in the shard namespace and workers in their own, synced through `wan`; or, with
    wan=None, the same learners without sync (the ceiling). Returns the workers' and shards'
    summaries (see summarize())."""
    os.makedirs(out_dir, exist_ok=True)
    server = os.path.join(build, "server/diloco-server")
    worker = os.path.join(build, "worker/diloco-worker")
    endpoints = [f"tcp://{SHARD_IP}:{7100 + s}" for s in range(fleet.shards)]
    with Procs() as procs:
        shard_procs = []
        if wan:
            for s in range(fleet.shards):
                argv = [server]
                if fleet.server_flagfile:
                    argv.append(f"--flagfile={fleet.server_flagfile}")
                # --insecure: the shards bind SHARD_IP, an address of the private namespaces
                # wan_net.sh makes for the emulated links, which nothing outside them can reach;
                # CURVE there would only measure encryption, not the links.
                argv += [f"--model={fleet.model}", f"--fragments={fleet.fragments}",
                         f"--bind={endpoints[s]}", "--insecure", f"--shard={s}",
                         f"--shards={fleet.shards}",
                         "--progress_interval=2s", f"--download_codec={fleet.download_codec}",
                         f"--port_file={out_dir}/shard{s}.endpoint",
                         f"--metrics_jsonl={out_dir}/shard{s}.jsonl"] + fleet.extra_server
                shard_procs.append(procs.start(wan.shard_ns(), argv, f"{out_dir}/shard{s}.log"))
            for s in range(fleet.shards):
                path = f"{out_dir}/shard{s}.endpoint"
                for _ in range(200):
                    if os.path.exists(path) and os.path.getsize(path) > 0:
                        break
                    if shard_procs[s].poll() is not None:
                        raise RuntimeError(f"shard {s} exited: see {out_dir}/shard{s}.log")
                    time.sleep(0.05)
        worker_procs = []
        for i in range(fleet.workers):
            argv = [worker, f"--model={fleet.model}", f"--fragments={fleet.fragments}",
                    f"--codec={fleet.codec}", f"--inner_steps={fleet.H}", f"--worker_id={i}",
                    f"--num_workers={fleet.workers}", f"--seed={1000 + i}", "--init_seed=1234",
                    f"--duration={fleet.duration_s}s", "--progress_interval=2s",
                    f"--metrics_jsonl={out_dir}/worker{i}.jsonl"] + fleet.learner_flags()
            if wan:
                argv += ["--servers=" + ",".join(endpoints), f"--join_timeout={join_timeout_s}s",
                         "--train_unjoined=false"]
            argv += fleet.extra_worker
            worker_procs.append(procs.start(wan.worker_ns(i) if wan else None, argv,
                                            f"{out_dir}/worker{i}.log"))
        deadline = time.time() + fleet.duration_s + (join_timeout_s if wan else 0) + 120
        rcs = []
        for p in worker_procs:
            try:
                rcs.append(p.wait(timeout=max(1, deadline - time.time())))
            except subprocess.TimeoutExpired:
                rcs.append(procs.stop(p, grace_s=5))
        for p in shard_procs:
            procs.stop(p)
    return summarize(out_dir, fleet, rcs)


def _params(log_path):
    try:
        with open(log_path, errors="replace") as f:
            m = re.search(r"\((\d+) params\)", f.read())
        return int(m.group(1)) if m else None
    except OSError:
        return None


def summarize(out_dir, fleet, rcs):
    """Per-worker figures from the workers' done and progress events, and the shards' rounds."""
    workers = []
    for i in range(fleet.workers):
        events = read_jsonl(f"{out_dir}/worker{i}.jsonl")
        done = next((e for e in reversed(events) if e.get("event") == "done"), None)
        prog = [e for e in events if e.get("event") == "progress"]
        last = prog[-1] if prog else {}
        w = {"rc": rcs[i], "done": done is not None, "params": _params(f"{out_dir}/worker{i}.log")}
        if done:
            w["steps"] = done.get("steps", 0)
            # The training loop's wall and busy time, when the worker reports them; else the
            # wall is the run's --duration and busy is steps x the nominal step time.
            w["wall_s"] = done.get("wall_s", fleet.duration_s)
            w["busy_s"] = done.get("busy_s", w["steps"] * fleet.step_ms / 1000)
            w["utilization"] = done.get("utilization", w["busy_s"] / w["wall_s"])
            w["measured_utilization"] = "utilization" in done
            for k in ("pushes", "applied", "stale", "refused", "resends", "reconnects"):
                w[k] = done.get(k, last.get(k, 0))
            # Traffic of the training loop only: done less the first progress event (after the
            # join, whose fp32 pull of every fragment is not a round's download).
            first = prog[0] if prog else {}

            def moved(k):
                return done.get(k, last.get(k, 0)) - first.get(k, 0)

            w["pushes_moved"] = moved("pushes")
            w["updates_moved"] = moved("updates_full") + moved("updates_delta")
            w["bytes_sent_moved"] = moved("bytes_sent")
            w["bytes_received_moved"] = moved("bytes_received")
            # --codec=auto / --inner_steps=auto: the choice at the end, how often it changed,
            # and the pushes due under the H in force over each progress interval.
            w["codec_final"] = done.get("codec", fleet.codec)
            w["h_final"] = last.get("inner_steps")
            w["link_choices"] = done.get("link_choices", 0)
            # An aligned push comes later by design (docs/worker.md, "Alignment"): the steps it
            # waited (aligned_steps, over the fragments) are no steps a push was due in.
            w["aligned_steps"] = done.get("aligned_steps", last.get("aligned_steps", 0))
            due, at, aligned = 0.0, 0, 0
            for e in prog:
                if e.get("inner_steps"):
                    due += ((e["step"] - at) * fleet.fragments -
                            (e.get("aligned_steps", aligned) - aligned)) / e["inner_steps"]
                at = e.get("step", at)
                aligned = e.get("aligned_steps", aligned)
            if w["h_final"]:
                due += ((w["steps"] - at) * fleet.fragments -
                        (w["aligned_steps"] - aligned)) / w["h_final"]
            # Fragment i first pushes after H + i H / F steps: (F - 1) / 2 rounds' pushes fewer.
            w["due_pushes"] = max(0.0, due - (fleet.fragments - 1) / 2)
            # Since the last change of H: pushes made over pushes due, once at least two rounds
            # at that H passed (None before): whether the schedule chosen is kept.
            since = next((k for k in range(len(prog) - 1, 0, -1)
                          if prog[k].get("inner_steps") != prog[k - 1].get("inner_steps")), 0)
            h, s0 = prog[since].get("inner_steps") if prog else None, prog[since] if prog else {}
            steps_at_h = w["steps"] - s0.get("step", 0)
            aligned_at_h = w["aligned_steps"] - s0.get("aligned_steps", 0)
            w["settled_push_ratio"] = (
                round((w["pushes"] - s0.get("pushes", 0)) /
                      ((steps_at_h * fleet.fragments - aligned_at_h) / h), 3)
                if h and steps_at_h >= 2 * h else None)
            w["push_to_adopt_p50_ms"] = done.get("push_to_adopt_p50_ms")
            w["push_to_adopt_p99_ms"] = done.get("push_to_adopt_p99_ms")
            w["staleness"] = last.get("staleness")
        workers.append(w)
    rounds = 0
    for s in range(fleet.shards):
        best = 0
        for e in read_jsonl(f"{out_dir}/shard{s}.jsonl"):
            st = e.get("stats") if isinstance(e.get("stats"), dict) else None
            if st and isinstance(st.get("versions"), dict):
                best = max(best, sum(int(v) for v in st["versions"].values()))
        rounds += best
    return {"workers": workers, "rounds": rounds}


def row(profile, fleet, synced, ceiling):
    """One output row: the fleet's means over its workers, against the ceiling's."""
    ws = [w for w in synced["workers"] if w.get("done")]
    cs = [w for w in ceiling["workers"] if w.get("done")] if ceiling else []
    util = statistics.mean(w["utilization"] for w in ws) if ws else None
    ceil = statistics.mean(w["utilization"] for w in cs) if cs else None
    params = next((w["params"] for w in ws if w.get("params")), None)
    frag = params / fleet.fragments if params else None
    pushes = sum(w["pushes"] for w in ws)
    up = sum(w["bytes_sent_moved"] for w in ws)
    down = sum(w["bytes_received_moved"] for w in ws)
    pushes_moved = sum(w["pushes_moved"] for w in ws)
    updates_moved = sum(w["updates_moved"] for w in ws)

    def p(key):
        xs = [w[key] for w in ws if w.get(key) is not None]
        return round(statistics.median(xs), 1) if xs else None

    steps = sum(w["steps"] for w in ws)
    auto = fleet.H == "auto"
    if auto:  # the schedule each worker chose, interval by interval (summarize)
        due = sum(w["due_pushes"] for w in ws)
    else:
        # Pushes the schedule asks for in each worker's steps (with --stream, fragment i first
        # pushes after H + i*H/F steps, then every H): the sync kept up when they were all made.
        due = sum((w["steps"] - i * fleet.H // fleet.fragments) // fleet.H
                  for w in ws for i in range(fleet.fragments)
                  if w["steps"] >= i * fleet.H // fleet.fragments)
        due -= sum(w.get("aligned_steps", 0) for w in ws) / fleet.H  # pushes aligned later
    choice = {}
    if auto:
        hs = [w["h_final"] for w in ws if w.get("h_final")]
        choice = {"codec_chosen": sorted(w["codec_final"] for w in ws),
                  "H_chosen": sorted(hs), "link_choices": sum(w["link_choices"] for w in ws),
                  "settled_push_ratio": [w["settled_push_ratio"] for w in ws]}
    return {**choice,
        "profile": profile, "H": fleet.H, "codec": fleet.codec,
        # The shards' flags win over the fleet's download codec (the last one given).
        "download_codec": next((f.split("=", 1)[1] for f in reversed(fleet.extra_server)
                                if f.startswith("--download_codec=")), fleet.download_codec),
        "workers": fleet.workers,
        **({"server_flags": " ".join(fleet.extra_server)} if fleet.extra_server else {}),
        **({"worker_flags": " ".join(fleet.extra_worker)} if fleet.extra_worker else {}),
        "utilization": round(util, 4) if util is not None else None,
        "ceiling": round(ceil, 4) if ceil is not None else None,
        "ratio": round(util / ceil, 4) if util is not None and ceil else None,
        "push_to_adopt_p50_ms": p("push_to_adopt_p50_ms"),
        "push_to_adopt_p99_ms": p("push_to_adopt_p99_ms"),
        "bytes_up_per_param_round":
            round(up / (pushes_moved * frag), 3) if pushes_moved and frag else None,
        "bytes_down_per_param_round":
            round(down / (updates_moved * frag), 3) if updates_moved and frag else None,
        # Pushes made over pushes due, and the H that amounts to: above H, the link (or the
        # shards) could not keep up and fragments were pushed less often than every H steps.
        "push_ratio": round(pushes / due, 3) if due else None,
        "h_effective": (round(steps * fleet.fragments / pushes, 1) if auto else
                        round(fleet.H * due / pushes, 1)) if pushes else None,
        "rounds": synced["rounds"], "steps": steps, "params": params,
        "workers_done": len(ws), "measured_utilization": all(w["measured_utilization"] for w in ws),
    }
