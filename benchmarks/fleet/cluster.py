"""Processes of a diloco-bench run on 127.0.0.1: shards (diloco-server) and synthetic learners
(diloco-worker --device=synthetic), their statistics and CPU time, and a follower that stamps
their JSON-lines events with the bench's clock (the events carry no wall time of their own).

Every process is started here, logs into the run's folder, is stopped by its PID, and is killed
at the latest when the bench exits (stop_all), so no run outlives the bench. Once a run's
processes are stopped, check_exits fails the run (RuntimeError) on any that exited non-zero or
had to be killed, naming it with its status and the last lines of its log; only the processes
the bench kills on purpose (the failure run's victims) are exempt.
"""
import json
import os
import signal
import subprocess
import threading
import time

_live = []  # every Popen still possibly running


def stop_all():
    for p in _live:
        if p.poll() is None:
            p.kill()
            p.wait()
    _live.clear()


def _spawn(argv, log_path):
    log = open(log_path, "ab")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    _live.append(p)
    return p


def log_tail(path, lines=20):
    """The last `lines` lines of a log, indented, for an error message."""
    try:
        with open(path, errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
    except OSError as e:
        return f"  | ({e})"
    return "\n".join("  | " + line for line in tail) or "  | (empty)"


def describe_exit(proc):
    """ "exited with status 2", "killed by signal 11 (SIGSEGV)", or that stop() had to kill it."""
    if getattr(proc, "stop_timed_out", None):
        return f"did not exit within {proc.stop_timed_out:g} s of SIGTERM (SIGKILLed)"
    rc = proc.returncode
    if rc is not None and rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def _wait_line(path, timeout_s, proc, log):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path) as f:
                line = f.readline().strip()
            if line:
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} {describe_exit(proc)} before writing {path}; "
                               f"the last lines of {log}:\n{log_tail(log)}")
        time.sleep(0.05)
    raise RuntimeError(f"no {path} within {timeout_s} s; the last lines of {log}:\n"
                       f"{log_tail(log)}")


def stop(procs, timeout_s):
    """SIGTERM to all, then SIGKILL to those still running after timeout_s (marked
    stop_timed_out, which check_exits reports)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.stop_timed_out = timeout_s
            p.kill()
            p.wait()


def first_crash(members, killed=()):
    """The message for the first of `members` whose process has already exited non-zero (not
    one in `killed`), with its log tail; None when none has. A row that failed otherwise (a
    Stats call unanswered, a worker not training) names the crash behind it first."""
    for m in members:
        p = m.proc
        if p is None or any(p is k for k in killed) or p.poll() is None or p.returncode == 0:
            continue
        return f"{m.name} {describe_exit(p)}; the last lines of {m.log}:\n{log_tail(m.log)}"
    return None


def check_exits(members, killed=()):
    """Raises RuntimeError for the first of `members` (Shard or Worker objects, their processes
    stopped) that exited with a non-zero status or had to be SIGKILLed, with the status and the
    last lines of its log. `killed`: processes killed on purpose, whatever their status."""
    for m in members:
        p = m.proc
        if p is None or any(p is k for k in killed):
            continue
        if p.poll() is None:
            raise RuntimeError(f"{m.name} still running at check_exits")
        if p.returncode != 0 or getattr(p, "stop_timed_out", None):
            raise RuntimeError(f"{m.name} {describe_exit(p)}; the last lines of {m.log}:\n"
                               f"{log_tail(m.log)}")


def cpu_seconds(proc):
    """User + system CPU time of a live process (0 once it has gone)."""
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Shard:
    """One diloco-server; restart() brings it back on the same endpoint and store."""

    def __init__(self, build, run_dir, index, shards, model, fragments, extra):
        self.index = index
        self.name = f"shard {index}"
        self.build = build
        self.port_file = os.path.join(run_dir, f"shard{index}.endpoint")
        self.jsonl = os.path.join(run_dir, f"shard{index}.jsonl")
        self.log = os.path.join(run_dir, f"shard{index}.log")
        self.store = os.path.join(run_dir, f"store{index}")
        self.argv = [os.path.join(build, "server/diloco-server"), f"--shard={index}",
                     f"--shards={shards}", f"--model={model}", f"--fragments={fragments}",
                     f"--store={self.store}",
                     f"--port_file={self.port_file}", f"--metrics_jsonl={self.jsonl}",
                     "--progress_interval=1s"] + extra
        self.endpoint = None
        self.proc = None

    def start(self, timeout_s=60):
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        bind = self.endpoint or "tcp://127.0.0.1:*"
        self.proc = _spawn(self.argv + [f"--bind={bind}"], self.log)
        self.endpoint = _wait_line(self.port_file, timeout_s, self.proc, self.log)

    def stats(self, timeout_ms=15000):
        out = subprocess.run([os.path.join(self.build, "ctl/diloco-ctl"), "stats",
                              f"--server={self.endpoint}", f"--timeout_ms={timeout_ms}"],
                             capture_output=True, text=True, timeout=timeout_ms / 1000 + 10)
        if out.returncode != 0:
            raise RuntimeError(f"diloco-ctl stats {self.endpoint}: {out.stderr.strip()}")
        return json.loads(out.stdout)


class Worker:
    """One synthetic learner; servers=None trains without sync (the utilization ceiling)."""

    def __init__(self, build, run_dir, wid, workers, servers, model, fragments, codec, h,
                 step_time, extra):
        self.wid = wid
        self.name = f"worker {wid}"
        self.jsonl = os.path.join(run_dir, f"worker{wid}.jsonl")
        self.log = os.path.join(run_dir, f"worker{wid}.log")
        self.argv = [os.path.join(build, "worker/diloco-worker"), "--device=synthetic",
                     f"--synthetic_step_time={step_time}", f"--worker_id={wid}",
                     f"--num_workers={workers}", f"--model={model}", f"--fragments={fragments}",
                     f"--codec={codec}", f"--inner_steps={h}", f"--seed={wid + 1}",
                     "--init_seed=1234", f"--metrics_jsonl={self.jsonl}",
                     "--progress_interval=1s", "--join_timeout=600s"] + extra
        if servers:
            self.argv.append("--servers=" + ",".join(servers))
        self.proc = None

    def start(self):
        self.proc = _spawn(self.argv, self.log)


def renamed(member, suffix, flag, attr):
    """Points `member`'s `flag` file (and its attribute) to a new name, so that its restart
    writes a file of its own."""
    old = getattr(member, attr)
    new = old.replace(".jsonl", f".{suffix}.jsonl")
    member.argv = [f"{flag}={new}" if a.startswith(f"{flag}=") else a for a in member.argv]
    setattr(member, attr, new)
    member.log = member.log.replace(".log", f".{suffix}.log")


def read_events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().endswith("}")]


def last_event(path, kind):
    ev = [e for e in read_events(path) if e.get("event") == kind]
    return ev[-1] if ev else None


def wait_training(workers, timeout_s):
    """Until every worker has written a progress event (joined, training), or raise."""
    end = time.monotonic() + timeout_s
    waiting = list(workers)
    while waiting and time.monotonic() < end:
        for w in list(waiting):
            if w.proc.poll() is not None:
                raise RuntimeError(f"worker {w.wid} {describe_exit(w.proc)} before training; the "
                                   f"last lines of {w.log}:\n{log_tail(w.log)}")
            if last_event(w.jsonl, "progress"):
                waiting.remove(w)
        time.sleep(0.2)
    if waiting:
        raise RuntimeError(f"workers {[w.wid for w in waiting]} not training in {timeout_s} s")


class Follower:
    """Reads new lines of JSON-lines files every `period` s on a thread; events() gives
    (seconds since start, key, event) in arrival order."""

    def __init__(self, files, period=0.2):
        self.files = dict(files)  # key -> path
        self.period = period
        self.t0 = time.monotonic()
        self._offsets = {}
        self._events = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _poll(self):
        now = time.monotonic() - self.t0
        for key, path in self.files.items():
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(self._offsets.get(key, 0))
                data = f.read()
            cut = data.rfind(b"\n") + 1  # whole lines only
            self._offsets[key] = self._offsets.get(key, 0) + cut
            with self._lock:
                for line in data[:cut].decode().splitlines():
                    if line.strip():
                        self._events.append((now, key, json.loads(line)))

    def _run(self):
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.period)

    def now(self):
        return time.monotonic() - self.t0

    def close(self):
        self._stop.set()
        self._thread.join()
        self._poll()

    def events(self):
        with self._lock:
            return list(self._events)
