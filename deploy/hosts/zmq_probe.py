#!/usr/bin/env python3
"""Probes of a ZeroMQ endpoint for deploy/hosts/check-fleet.sh; one line of verdict, exit 0
when the endpoint behaved as a CURVE shard must.

  zmq_probe.py greet HOST PORT           the mechanism the listener's ZMTP 3 greeting names:
                                         "zmq-NULL" (plaintext ZeroMQ), "zmq-CURVE", or
                                         "not-zmq" (another protocol); exit 0 unless zmq-NULL
  zmq_probe.py plain ENDPOINT            a DEALER without keys: exit 0 when its handshake fails
  zmq_probe.py stranger ENDPOINT KEY     a DEALER with a fresh key pair the shard does not list,
                                         KEY the shard's public key (Z85 or a file): exit 0 when
                                         its handshake fails
  zmq_probe.py known ENDPOINT KEY SECRET a DEALER with a listed key (SECRET: its secret key
                                         file): exit 0 when its handshake succeeds (the control)
Each waits at most --timeout seconds (10) for the handshake's outcome (socket monitor events).
"""
import socket
import sys
import time

import zmq
from zmq.utils.monitor import recv_monitor_message


def key_text(arg):
    try:
        with open(arg) as f:
            return f.read().strip()
    except OSError:
        return arg


def greet(host, port):
    # Our signature and major version only: a ZMTP 3 peer then sends its whole greeting (its
    # mechanism included) before it sees ours, which it would refuse on a mismatch.
    s = socket.create_connection((host, int(port)), timeout=3)
    s.sendall(b"\xff" + b"\0" * 8 + b"\x7f\x03")
    data = b""
    try:
        while len(data) < 32:
            chunk = s.recv(64 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    if len(data) >= 32 and data[0] == 0xFF and data[9] == 0x7F:
        verdict = "zmq-" + data[12:32].rstrip(b"\0").decode(errors="replace")
    else:
        verdict = "not-zmq"
    print(verdict)
    return 1 if verdict == "zmq-NULL" else 0


def handshake(endpoint, keys, timeout=10.0):
    """'succeeded', 'failed' or 'no answer', and the monitor events seen."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    if keys:
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = keys
    mon = s.get_monitor_socket()
    s.connect(endpoint)
    names = {v: k for k, v in vars(zmq).items() if k.startswith("EVENT_")}
    poller = zmq.Poller()
    poller.register(mon, zmq.POLLIN)
    seen, outcome = [], "no answer"
    deadline = time.time() + timeout
    while time.time() < deadline and outcome == "no answer":
        if not poller.poll(200):
            continue
        name = names.get(recv_monitor_message(mon)["event"], "?")
        seen.append(name.replace("EVENT_", ""))
        if name == "EVENT_HANDSHAKE_SUCCEEDED":
            outcome = "succeeded"
        elif name.startswith("EVENT_HANDSHAKE_FAILED"):
            outcome = "failed"
        elif name == "EVENT_DISCONNECTED" and "CONNECTED" in seen:
            outcome = "failed"
    s.disable_monitor()
    mon.close()
    s.close()
    ctx.term()
    return outcome, seen


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "greet" and len(argv) == 4:
        return greet(argv[2], argv[3])
    if mode == "plain" and len(argv) == 3:
        keys, want = None, "failed"
    elif mode == "stranger" and len(argv) == 4:
        public, secret = zmq.curve_keypair()
        keys, want = (key_text(argv[3]).encode(), public, secret), "failed"
    elif mode == "known" and len(argv) == 5:
        secret = key_text(argv[4]).encode()
        keys, want = (key_text(argv[3]).encode(), zmq.curve_public(secret), secret), "succeeded"
    else:
        print(__doc__, file=sys.stderr)
        return 2
    outcome, seen = handshake(argv[2], keys)
    print(f"{mode} {argv[2]}: handshake {outcome} ({' '.join(seen)})")
    return 0 if outcome == want else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
