"""Test helpers for the Python learner: a shard on 127.0.0.1 (a free port it picks), stopped by
its PID, and a way to import the built diloco_ps package.

    with Shard(build, tmp, ["--model=manifest:m.json", "--fragments=4"]) as shard:
        learner = diloco_ps.Learner(servers=shard.endpoint, ...)
"""
import os
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
