"""The ceilings every diloco-bench row is compared with, measured in the same run on the same
machine: memcpy bandwidth (numpy's copy of pre-touched buffers, bytes read + written per second,
the convention of diloco-bench-server) and raw ZeroMQ loopback throughput (diloco-bench-transport's
raw DEALER->ROUTER modes, the faster of one multipart message and one message per 4 MiB frame,
no validation, no CURVE)."""
import os
import re
import subprocess
import time

import numpy as np


def memcpy_gbps(mib, reps):
    n = mib << 20
    a = np.ones(n, dtype=np.uint8)
    b = np.zeros(n, dtype=np.uint8)
    np.copyto(b, a)  # touch both
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * n / best / 1e9


def zmq_raw_gbps(build, total_mib, reps):
    exe = os.path.join(build, "benchmarks/transport/diloco-bench-transport")
    out = subprocess.run([exe, "--sizes_mib=4", f"--total_mib={total_mib}", f"--reps={reps}",
                          "--curve=false", "--skip_push"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    # "    4 MiB      1   256 |   4.35   4.35   0.00     0% | ..."
    m = re.search(r"^\s*4 MiB\s+\d+\s+\d+\s+\|\s+([\d.]+)\s+([\d.]+)", out, re.M)
    if not m:
        raise RuntimeError("diloco-bench-transport: no 4 MiB row in\n" + out)
    return max(float(m.group(1)), float(m.group(2)))


def measure(build, quick):
    return {"memcpy_gbps": memcpy_gbps(64 if quick else 256, 3 if quick else 5),
            "zmq_raw_gbps": zmq_raw_gbps(build, 256 if quick else 1024, 2 if quick else 3)}
