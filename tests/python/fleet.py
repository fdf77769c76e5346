"""Test helpers for the Python learner: a shard on 127.0.0.1 (a free port it picks), stopped by
its PID, a way to import the built diloco_ps package, bounded waits on processes, and the
verdict every test prints.

    with Shard(build, tmp, ["--model=manifest:m.json", "--fragments=4"]) as shard:
        learner = diloco_ps.Learner(servers=shard.endpoint, ...)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time


def import_diloco_ps(python_dir):
    sys.path.insert(0, python_dir)
    import diloco_ps
    return diloco_ps


def wait_for_file(path, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear in {timeout}s")


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_bounded(p, timeout, what, log):
    """Waits for process `p` at most `timeout` s (then kills it and raises); returns its exit
    status."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"{what} ran past {timeout}s; log {log}")


def run_bounded(cmd, log, timeout):
    """Runs `cmd` with its output in `log`, at most `timeout` s; returns its exit status."""
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    return wait_bounded(p, timeout, cmd[0], log)


def kill_all(procs):
    """SIGKILLs (by PID) and reaps every process of `procs` still running."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def verdict(failures, tmp):
    """Prints FAIL with the failures (a list of messages, or a count) and where the logs are, or
    PASS and removes `tmp`; returns the exit status."""
    if failures:
        what = (f"{failures} checks" if isinstance(failures, int)
                else "\n" + "\n".join(failures))
        print(f"FAIL: {what}\nlogs in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


class Shard:
    """One diloco-server shard (--shard=0 --shards=1) with `args` added; its log is
    TMP/shard.log. Stopped with SIGTERM (then SIGKILL) on exit."""

    def __init__(self, build, tmp, args, name="shard"):
        self.log = f"{tmp}/{name}.log"
        port = f"{tmp}/{name}.port"
        self.proc = subprocess.Popen(
            [f"{build}/server/diloco-server", "--shard=0", "--shards=1",
             "--bind=tcp://127.0.0.1:*", f"--port_file={port}", "--worker_timeout=5s",
             "--progress_interval=1000s", *args],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        try:
            self.endpoint = wait_for_file(port, 20)
        except AssertionError:
            self.stop()
            raise AssertionError("the shard did not start:\n" + open(self.log).read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
