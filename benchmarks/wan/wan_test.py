#!/usr/bin/python3
"""The WAN harness's test (ctest wan_harness_test): on links emulated by wan_net.sh,

  1. a rate-limited link carries no more than rate x time + burst + queue (upload and download,
     measured at the receiver, with a generous margin);
  2. the delayer holds packets at least the configured one-way delay (a TCP handshake, which
     crosses the path twice, takes at least the RTT);
  3. a tiny fleet (one shard, two workers) completes rounds through it, and its traffic crossed
     the delayer.

Upper and lower bounds that load cannot break (a busy machine only slows things down); never
"at least this fast". Exits 77 (skipped) at once without root, netns, veth, tbf or TUN.

  wan_test.py --build=DIR
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wanlib  # noqa: E402

# A TCP sink: accepts one connection on HOST:PORT, prints the bytes it received and the seconds
# between the first and the last of them.
SINK = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, _ = s.accept(); n = 0; t0 = t1 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    t1 = time.monotonic(); t0 = t0 or t1; n += len(b)
print(n, (t1 - t0) if t0 else 0.0, flush=True)
"""
# A TCP source: connects to HOST:PORT, sends as fast as it can for SECONDS; prints the handshake's
# duration (connect()) in seconds.
SOURCE = r"""
import socket, sys, time
t = time.monotonic(); c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
hs = time.monotonic() - t; buf = b"x" * (1 << 16); end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end: c.sendall(buf)
c.close(); print(hs, flush=True)
"""

PY = "/usr/bin/python3"
failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)


def transfer(wan, src_ns, dst_ns, dst_ip, port, seconds):
    """Bytes received and the receiver's first-to-last-byte seconds; the handshake's seconds."""
    sink = subprocess.Popen(["ip", "netns", "exec", dst_ns, PY, "-c", SINK, dst_ip, str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "listening"
        src = subprocess.run(["ip", "netns", "exec", src_ns, PY, "-c", SOURCE, dst_ip, str(port),
                              str(seconds)], capture_output=True, text=True,
                             timeout=seconds + 60, check=True)
        n, span = sink.communicate(timeout=60)[0].split()
        return int(n), float(span), float(src.stdout.strip())
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    why = wanlib.support()
    if why:
        print(f"skipped: {why}")
        return 77
    wanlib.install_signal_handlers()
    build = os.path.abspath(args.build)

    # 1 and 2: 20 Mbit/s, 80 ms RTT, no jitter or loss.
    rate, rtt = 20, 80
    with wanlib.Wan(build, 1, rate, rtt, jitter_ms=0, loss=0) as wan:
        worker_ip = "10.201.1.2"
        for name, src, dst, ip, port in (("upload", wan.worker_ns(0), wan.shard_ns(),
                                          wanlib.SHARD_IP, 9001),
                                         ("download", wan.shard_ns(), wan.worker_ns(0),
                                          worker_ip, 9002)):
            n, span, handshake = transfer(wan, src, dst, ip, port, seconds=4)
            # tbf lets through at most rate x t + its burst (1 ms at the rate, >= 4 packets);
            # the bytes queued behind it (one BDP, >= 64 KiB) may land at the start of the
            # window. Payload only (headers also count against the rate): 25% margin on top.
            bound = rate * 1e6 / 8 * span * 1.25 + 4 * 1500 + max(262144, rate * 1e6 / 8 * rtt / 1e3)
            check(0 < n <= bound,
                  f"{name}: {n} bytes in {span:.2f} s <= {bound:.0f} ({n * 8 / 1e6 / max(span, 1e-9):.1f} "
                  f"Mbit/s on a {rate} Mbit/s link)")
            check(handshake >= rtt / 1e3 * 0.99,
                  f"{name}: TCP handshake {handshake * 1e3:.1f} ms >= the {rtt} ms RTT "
                  f"(2 x the {rtt / 2} ms one-way delay)")
    stats = wan.delay_stats()
    check(stats is not None and stats["packets"] > 0 and stats["dropped"] == 0,
          f"the transfers crossed the delayer, none dropped: {stats}")

    # 3: a tiny fleet through the path, 100 Mbit/s, 60 ms RTT, default jitter and loss.
    with tempfile.TemporaryDirectory(prefix="wan-test.") as out:
        fleet = wanlib.Fleet("tiny", 4, "int8:256", 5, workers=2, shards=1, duration_s=12,
                             step_ms=20, synthetic=wanlib.synthetic_learner(build))
        with wanlib.Wan(build, 2, 100, 60) as wan:
            res = wanlib.run_fleet(build, out, fleet, wan=wan, join_timeout_s=60)
        ws = res["workers"]
        check(all(w["rc"] == 0 and w["done"] for w in ws),
              f"both workers ran to the end: rc {[w['rc'] for w in ws]}")
        check(all(w.get("applied", 0) >= 3 for w in ws),
              f"each worker had >= 3 pushes applied: {[w.get('applied') for w in ws]}")
        check(res["rounds"] >= 3, f"the shard closed >= 3 rounds: {res['rounds']}")
        stats = wan.delay_stats()
        check(stats is not None and stats["bytes"] > 0,
              f"the fleet's traffic crossed the delayer: {stats}")
        if failures:
            for f in sorted(os.listdir(out)):
                if f.endswith(".log"):
                    print(f"--- {f}\n" + open(os.path.join(out, f), errors="replace").read()[-3000:])
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except wanlib.Stop as e:
        print(f"wan_test: stopped by {e}")
        sys.exit(1)
