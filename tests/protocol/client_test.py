#!/usr/bin/python3
"""protocol_client_test: a Python client, written from docs/protocol.md alone, against a shard.

Starts one diloco-server on 127.0.0.1 (free port, no store, whole Nesterov steps per round) and
drives it with wire_client.py, which follows docs/protocol.md ("Writing a client"),
docs/kernels.md and schema/protocol.fbs only. If this passes, those documents are enough to
write a client. Steps:

  a. Hello on a data and a control connection -> Welcome (fields checked).
  b. A push before theta(0) -> NotInitialized; InitFragment of a seeded theta(0) -> Initialized.
  c. Pull every fragment: theta(0) bit for bit.
  d. Five rounds of pushes (fp32 whole and as trains, int8 whole and as a train): Queued, then
     an Applied FragmentUpdate whose values match torch.optim.SGD(nesterov=True).
  e. A catalogue of malformed or refused messages, each with the reply the doc promises; then
     every fragment is pulled and must be unchanged, and the Stats counters must account for
     every refusal. Last, two workers: a second push while the first is open is Malformed, and
     the round of both workers' pushes is their mean.
  f. Leaving: worker B leaves (answered Leave, again when repeated; a Leave of an older
     generation is refused BadIdentity), and then A's lone push closes its round at once, where B,
     live and missing, held it open for the grace window.
  g. A summary; exit status 0 only if everything passed (77: a Python module is missing).

Usage: client_test.py --server PATH/diloco-server --generated DIR (flatc --python output).
"""

import argparse
import collections
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77
for _module in ("zmq", "flatbuffers", "xxhash", "torch"):
    try:
        importlib.import_module(_module)
    except ImportError as _e:
        print(f"SKIP: Python module {_module} cannot be imported ({_e})")
        sys.exit(SKIP)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import zmq  # noqa: E402

sys.dont_write_bytecode = True  # nothing generated in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire_client as w  # noqa: E402

# A model over tiny's values whose four fragments are each a little over one chunk, so every
# fragment travels as a train of two chunks both ways.
MODEL = "V=65536"
FRAGMENTS, SHARDS = 4, 1
LR, MOMENTUM = 0.7, 0.9
MAX_STALENESS = 2
ROUNDS = 5
REPLY_TIMEOUT_S = 20.0
TIME_LIMIT_S = 170
REL_TOL = 1e-6
TOKENS, STEPS = 4096, 8
# A round closes at once when every live worker has pushed, so one worker's rounds never wait.
# With a live worker missing it stays open for the grace window, which grows with the workers'
# step_time_us up to --grace_cap: a long step time in every message makes it the whole cap, so
# the two-worker check's round stays open until the second worker pushes (docs/protocol.md,
# "When a round closes").
STEP_TIME_US = 30_000_000
GRACE_CAP = "20s"
INT8_BLOCK = 120  # a block that is no power of two: chunk_elements 1048680
WORKER_A, WORKER_B, WORKER_OTHER = 7, 8, 9


class TestFailure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise TestFailure(what)


# ---------------------------------------------------------------------------------------------
# The server process


class Server:
    """diloco-server as a subprocess, always stopped by its PID (SIGTERM, then SIGKILL)."""

    def __init__(self, binary, workdir):
        self.port_file = os.path.join(workdir, "port")
        self.log_path = os.path.join(workdir, "server.log")
        argv = [binary, "--bind=tcp://127.0.0.1:*", f"--port_file={self.port_file}",
                f"--model={MODEL}", f"--shards={SHARDS}", "--shard=0",
                f"--fragments={FRAGMENTS}", "--round_step=full", "--round_norm=arrived",
                f"--outer_lr={LR}", f"--outer_momentum={MOMENTUM}", "--quorum=1",
                f"--grace_cap={GRACE_CAP}", "--worker_timeout=60s",
                f"--max_staleness={MAX_STALENESS}", "--progress_interval=1000s",
                "--download_codec=fp32"]  # this client reads whole fragments only
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        print(f"started diloco-server pid {self.proc.pid}: {' '.join(argv[1:])}")

    def endpoint(self, timeout_s=20.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TestFailure(f"diloco-server exited with {self.proc.returncode}")
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    line = f.readline()
                if line.endswith("\n"):  # the whole line is written
                    return line.strip()
            time.sleep(0.05)
        raise TestFailure("diloco-server wrote no port file")

    def stop(self):
        """Idempotent: SIGTERM, up to 10 s, then SIGKILL; always by the PID it started."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()

    def log_tail(self, lines=30):
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# Helpers over wire_client


def recv_one(conn, what, timeout_s=REPLY_TIMEOUT_S):
    m = conn.recv(timeout_s)
    check(m is not None, f"no reply to {what} within {timeout_s} s")
    return m


def expect_type(m, msg_type, what):
    if m.type == w.MsgType.Error:
        raise TestFailure(f"{what}: Error {w.enum_name(w.ErrorCode, m.header.error_code)}: "
                          f"{m.header.message}")
    check(m.type == msg_type, f"{what}: got {m!r}, wanted {w.enum_name(w.MsgType, msg_type)}")
    return m.header


def hello(conn, channel, what):
    conn.send(type=w.MsgType.Hello, channel=channel, step_time_us=STEP_TIME_US)
    h = expect_type(recv_one(conn, what), w.MsgType.Welcome, what)
    return h


def push_fields(fragment, n, seq, base_version, codec=w.CODEC_FP32, block=w.FRAGMENT_BLOCK):
    return dict(type=w.MsgType.Push, fragment_id=fragment, seq=seq, base_version=base_version,
                tokens=TOKENS, steps=STEPS, codec=codec, block=block, num_elements=n,
                chunk_elements=w.chunk_elements(block), step_time_us=STEP_TIME_US)


def encode(values, codec, block):
    """(frames, the values the shard decodes) of a delta."""
    if codec == w.CODEC_FP32:
        return w.encode_fp32(values, block), values
    frames = w.encode_int8(values, block)
    return frames, w.decode_int8(frames, values.size, block)


def pull_values(conn, fragment):
    conn.send(type=w.MsgType.Pull, fragment_id=fragment)
    m = recv_one(conn, f"Pull {fragment}")
    h = expect_type(m, w.MsgType.FragmentUpdate, f"Pull {fragment}")
    check(h.fragment_id == fragment, f"Pull {fragment} answered for fragment {h.fragment_id}")
    return h.version, w.fragment_values(m)


def stats(conn):
    conn.send(type=w.MsgType.Stats)
    m = recv_one(conn, "Stats")
    expect_type(m, w.MsgType.Stats, "Stats")
    return json.loads(m.header.message)


def rel_error(got, ref):
    """max |got - ref| over max |ref| (the test's relative error)."""
    return float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))) /
                 max(float(np.max(np.abs(ref))), 1e-30))


class Reference:
    """torch.optim.SGD(lr, momentum, nesterov=True), one optimizer per fragment."""

    def __init__(self, values):
        self.params = {f: torch.nn.Parameter(torch.from_numpy(v.copy()))
                       for f, v in values.items()}
        self.opts = {f: torch.optim.SGD([p], lr=LR, momentum=MOMENTUM, nesterov=True)
                     for f, p in self.params.items()}

    def step(self, fragment, delta):
        p = self.params[fragment]
        p.grad = torch.from_numpy(np.ascontiguousarray(delta, dtype=np.float32).copy())
        self.opts[fragment].step()
        return p.detach().numpy()


# ---------------------------------------------------------------------------------------------
# The test


class ClientTest:
    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.ctx = zmq.Context()
        self.connections = []
        manifest = w.model_manifest(MODEL)
        self.plan = w.Plan(manifest, FRAGMENTS, SHARDS)
        self.owned = self.plan.fragments_of(0)
        self.sizes = {f: self.plan.fragment_size(f) for f in self.owned}
        self.generation = int(time.time() * 1e6)
        self.rng = np.random.default_rng(20240601)
        self.versions = {}
        self.values = {}
        self.incarnation = None
        self.max_rel_error = 0.0
        self.rounds_checked = 0
        self.kinds_passed = []
        self.seq = {f: 0 for f in self.owned}

    def identity(self, worker=WORKER_A, generation=None):
        return dict(plan_fingerprint=self.plan.fingerprint,
                    model_fingerprint=self.plan.model_fingerprint, worker_id=worker,
                    generation=self.generation if generation is None else generation)

    def connect(self, identity=None):
        conn = w.Connection(self.ctx, self.endpoint, identity)
        self.connections.append(conn)
        return conn

    def close(self):
        for c in self.connections:
            c.close()
        self.ctx.term()

    # a. Hello -> Welcome
    def join(self):
        self.data = self.connect(self.identity())
        h = hello(self.data, w.Channel.Data, "data Hello")
        check(h.shard == 0, f"Welcome shard {h.shard}")
        check(h.worker_id == WORKER_A, f"Welcome worker_id {h.worker_id}")
        check(h.generation == self.generation, f"Welcome generation {h.generation}")
        check(h.channel == w.Channel.Data, f"Welcome channel {h.channel}")
        check(h.versions == {f: 0 for f in self.owned}, f"Welcome versions {h.versions}")
        check(h.incarnation != 0, "Welcome without incarnation")
        self.incarnation = h.incarnation
        print(f"a. Welcome: shard {h.shard}, incarnation {h.incarnation:#x}, versions "
              f"{h.versions}, credit_bytes {h.credit_bytes}")
        self.control = self.connect(self.identity())
        h = hello(self.control, w.Channel.Control, "control Hello")
        check(h.channel == w.Channel.Control and h.worker_id == WORKER_A,
              f"control Welcome {h!r}")
        self.control.send(type=w.MsgType.Heartbeat, step_time_us=STEP_TIME_US)

    def check_reply_common(self, h, what):
        check(h.incarnation == self.incarnation,
              f"{what}: incarnation {h.incarnation:#x}, Welcome said {self.incarnation:#x}")

    # b. InitFragment
    def initialize(self):
        f0 = self.owned[0]
        self.data.send(w.encode_fp32(np.zeros(self.sizes[f0], np.float32)),
                       **push_fields(f0, self.sizes[f0], 1, 0))
        m = recv_one(self.data, "Push before InitFragment")
        problems = error_problems(m, w.ErrorCode.NotInitialized, w.MsgType.Push,
                                  dict(worker_id=WORKER_A, fragment_id=f0, seq=1))
        check(not problems, "Push before InitFragment: " + "; ".join(problems))
        self.kinds_passed.append("push to a fragment without theta(0) -> NotInitialized")
        self.data.send(type=w.MsgType.Pull, fragment_id=f0)
        problems = error_problems(recv_one(self.data, "Pull before InitFragment"),
                                  w.ErrorCode.NotInitialized, w.MsgType.Pull,
                                  dict(worker_id=WORKER_A))
        check(not problems, "Pull before InitFragment: " + "; ".join(problems))
        self.kinds_passed.append("pull of a fragment without theta(0) -> NotInitialized")

        theta0 = self.rng.standard_normal(self.plan.num_elements).astype(np.float32)
        for i, f in enumerate(self.owned):
            values = self.plan.gather(theta0, f)
            self.values[f] = values
            self.data.send(w.encode_fp32(values), train=(i % 2 == 1),
                           type=w.MsgType.InitFragment, fragment_id=f, seq=0,
                           codec=w.CODEC_FP32, block=w.FRAGMENT_BLOCK,
                           num_elements=values.size,
                           chunk_elements=w.chunk_elements(w.FRAGMENT_BLOCK))
            h = expect_type(recv_one(self.data, f"InitFragment {f}"), w.MsgType.PushAck,
                            f"InitFragment {f}")
            check(h.ack == w.AckStatus.Initialized and h.version == 1 and h.fragment_id == f,
                  f"InitFragment {f}: {h!r}")
            self.check_reply_common(h, f"InitFragment {f}")
            self.versions[f] = 1
        print(f"b. InitFragment: {len(self.owned)} fragments of {list(self.sizes.values())} "
              "values -> Initialized, version 1 (two sent whole, two as trains)")

    # c. Pull theta(0)
    def pull_theta0(self):
        for f in self.owned:
            version, got = pull_values(self.data, f)
            check(version == 1, f"Pull {f}: version {version}")
            check(got.tobytes() == self.values[f].tobytes(), f"Pull {f}: not theta(0)")
        print("c. Pull: every fragment is theta(0) bit for bit")

    # d. Rounds
    def rounds(self):
        self.ref = Reference(self.values)
        for r in range(1, ROUNDS + 1):
            pending = {}
            for i, f in enumerate(self.owned):
                codec, block = w.CODEC_FP32, w.FRAGMENT_BLOCK
                if r == 3 and i < 2:
                    codec, block = w.CODEC_INT8, INT8_BLOCK
                delta = (self.rng.standard_normal(self.sizes[f]) * 1e-2).astype(np.float32)
                frames, decoded = encode(delta, codec, block)
                self.seq[f] += 1
                train = r == 2 or (r == 3 and i == 1)
                self.data.send(frames, train=train,
                               **push_fields(f, self.sizes[f], self.seq[f], self.versions[f],
                                             codec, block))
                pending[f] = decoded
            self.collect_round(r, pending)
            self.control.send(type=w.MsgType.Heartbeat, step_time_us=STEP_TIME_US)
            self.rounds_checked += 1
        print(f"d. {ROUNDS} rounds of {len(self.owned)} pushes (fp32 and int8:{INT8_BLOCK}, "
              f"whole and trains): versions {self.versions}, max relative error "
              f"{self.max_rel_error:.3g}")

    def collect_round(self, r, pending):
        queued = set()
        applied = set()
        while len(applied) < len(pending):
            m = recv_one(self.data, f"round {r}")
            h = m.header
            self.check_reply_common(h, f"round {r}")
            f = h.fragment_id
            check(f in pending, f"round {r}: reply for fragment {f}: {m!r}")
            if m.type == w.MsgType.PushAck:
                check(h.ack == w.AckStatus.Queued and h.seq == self.seq[f] and f not in queued,
                      f"round {r}: {h!r}")
                queued.add(f)
                continue
            expect_type(m, w.MsgType.FragmentUpdate, f"round {r} fragment {f}")
            check(f in queued, f"round {r} fragment {f}: Applied before Queued")
            check(h.ack == w.AckStatus.Applied and h.seq == self.seq[f] and
                  h.generation == self.generation and f not in applied,
                  f"round {r} fragment {f}: {h!r}")
            check(h.version == self.versions[f] + 1,
                  f"round {r} fragment {f}: version {h.version} after {self.versions[f]}")
            got = w.fragment_values(m)
            ref = self.ref.step(f, pending[f])
            err = rel_error(got, ref)
            self.max_rel_error = max(self.max_rel_error, err)
            check(err <= REL_TOL, f"round {r} fragment {f}: relative error {err:.3g}")
            self.versions[f] = h.version
            self.values[f] = got
            applied.add(f)

    # e. Catalogue
    def catalogue(self):
        before = stats(self.data)
        check(before["versions"] == {str(f): v for f, v in self.versions.items()},
              f"Stats versions {before['versions']}")
        for f in self.owned:
            version, got = pull_values(self.data, f)
            check(version == self.versions[f] and got.tobytes() == self.values[f].tobytes(),
                  f"Pull {f} after the rounds: version {version} or values differ")
        cat = Catalogue(self)
        cat.run()
        for f in self.owned:
            version, got = pull_values(self.data, f)
            check(version == self.versions[f], f"after the catalogue: fragment {f} version "
                  f"{version}, was {self.versions[f]}")
            check(got.tobytes() == self.values[f].tobytes(),
                  f"after the catalogue: fragment {f} values changed")
        after = stats(self.data)
        for name in cat.passed:
            print(f"   ok {name}")
        for name, problems in cat.failed:
            print(f"   FAILED {name}: {'; '.join(problems)}")
        check(not cat.failed, f"{len(cat.failed)} catalogue kinds failed")
        cat.check_stats(before, after)
        print(f"e. catalogue: {len(cat.passed)} kinds passed; every fragment unchanged; Stats "
              f"bad_messages +{after['bad_messages'] - before['bad_messages']}, "
              f"refused_by_reason +{cat.reasons} (checked "
              f"{'per reason' if cat.by_reason else 'in total'}), trains_cut "
              f"+{after['trains_cut'] - before['trains_cut']}")
        self.kinds_passed += cat.passed

    # e, last: two workers, one open push
    def open_push(self):
        """A second push while the first is open is Malformed; then B's push closes the round.

        B's Hello makes it a live worker, so A's push waits in the open round (see
        STEP_TIME_US) until B's arrives.
        """
        f = self.owned[0]
        b = self.b = self.connect(self.identity(WORKER_B, self.generation + 5))
        hello(b, w.Channel.Data, "worker B Hello")
        n = self.sizes[f]
        d_a = (self.rng.standard_normal(n) * 1e-2).astype(np.float32)
        d_b = (self.rng.standard_normal(n) * 1e-2).astype(np.float32)
        self.seq[f] += 1
        self.data.send(w.encode_fp32(d_a), **push_fields(f, n, self.seq[f], self.versions[f]))
        h = expect_type(recv_one(self.data, "open push"), w.MsgType.PushAck, "open push")
        check(h.ack == w.AckStatus.Queued and h.seq == self.seq[f], f"open push: {h!r}")
        self.data.send(w.encode_fp32(d_a),
                       **push_fields(f, n, self.seq[f] + 1, self.versions[f]))
        problems = error_problems(recv_one(self.data, "second push"), w.ErrorCode.Malformed,
                                  w.MsgType.Push,
                                  dict(worker_id=WORKER_A, fragment_id=f, seq=self.seq[f] + 1))
        check(not problems, "a second push while the first is open: " + "; ".join(problems))
        b.send(w.encode_fp32(d_b), **push_fields(f, n, 1, self.versions[f]))
        h = expect_type(recv_one(b, "worker B push"), w.MsgType.PushAck, "worker B push")
        check(h.ack == w.AckStatus.Queued, f"worker B push: {h!r}")
        # Equal tokens and steps: equal weights, so the round's delta is the plain mean.
        ref = self.ref.step(f, ((d_a + d_b) * np.float32(0.5)).astype(np.float32))
        for conn, worker, seq, gen in ((self.data, "A", self.seq[f], self.generation),
                                       (b, "B", 1, self.generation + 5)):
            m = recv_one(conn, f"worker {worker} Applied")
            h = expect_type(m, w.MsgType.FragmentUpdate, f"worker {worker} Applied")
            check(h.ack == w.AckStatus.Applied and h.seq == seq and h.generation == gen and
                  h.version == self.versions[f] + 1, f"worker {worker} Applied: {h!r}")
            err = rel_error(w.fragment_values(m), ref)
            self.max_rel_error = max(self.max_rel_error, err)
            check(err <= REL_TOL, f"two-worker round: relative error {err:.3g}")
        self.versions[f] += 1
        self.rounds_checked += 1
        self.kinds_passed.append("a second push for a fragment with an open push -> Malformed")
        print(f"e. two workers: second open push refused Malformed; round of two pushes = "
              f"Nesterov on their mean (relative error {err:.3g})")


    # f, after the two workers' round: B leaves
    def leave(self):
        """docs/protocol.md, "Leaving": B's Leave is answered with a Leave naming it, a repeat
        the same; a Leave of an older generation of B is refused BadIdentity. Then A's push
        closes its round at once: B no longer counts as live (before, its round stayed open for
        the grace window, the whole GRACE_CAP with STEP_TIME_US)."""
        b, gen_b = self.b, self.generation + 5
        for what in ("Leave", "repeated Leave"):
            b.send(type=w.MsgType.Leave)
            h = expect_type(recv_one(b, what), w.MsgType.Leave, what)
            check(h.worker_id == WORKER_B and h.generation == gen_b, f"{what}: {h!r}")
            self.check_reply_common(h, what)
        old = self.connect(self.identity(WORKER_B, gen_b - 1))
        old.send(type=w.MsgType.Leave)
        problems = error_problems(recv_one(old, "older generation's Leave"),
                                  w.ErrorCode.BadIdentity, w.MsgType.Leave,
                                  dict(worker_id=WORKER_B))
        check(not problems, "older generation's Leave: " + "; ".join(problems))
        f = self.owned[0]
        n = self.sizes[f]
        d_a = (self.rng.standard_normal(n) * 1e-2).astype(np.float32)
        self.seq[f] += 1
        start = time.monotonic()
        self.data.send(w.encode_fp32(d_a), **push_fields(f, n, self.seq[f], self.versions[f]))
        h = expect_type(recv_one(self.data, "lone push"), w.MsgType.PushAck, "lone push")
        check(h.ack == w.AckStatus.Queued, f"lone push: {h!r}")
        ref = self.ref.step(f, d_a)
        m = recv_one(self.data, "lone push Applied")
        took = time.monotonic() - start
        h = expect_type(m, w.MsgType.FragmentUpdate, "lone push Applied")
        check(h.ack == w.AckStatus.Applied and h.version == self.versions[f] + 1,
              f"lone push Applied: {h!r}")
        check(took < 5.0, f"the round after B left took {took:.1f} s (grace cap {GRACE_CAP})")
        err = rel_error(w.fragment_values(m), ref)
        self.max_rel_error = max(self.max_rel_error, err)
        check(err <= REL_TOL, f"round after the leave: relative error {err:.3g}")
        self.versions[f] += 1
        self.rounds_checked += 1
        st = stats(self.data)
        check(st["leaves"] == 1 and st["leaves_repeated"] == 1 and st["leaves_refused"] == 1,
              f"Stats leaves {st['leaves']}, repeated {st['leaves_repeated']}, refused "
              f"{st['leaves_refused']}")
        self.kinds_passed.append("a Leave of an older generation -> BadIdentity")
        print(f"f. B left (answered, and again when repeated; an older generation refused); "
              f"A's lone round closed in {took:.2f} s (relative error {err:.3g})")


def error_problems(m, code, refused_type=None, names=None, incarnation=None):
    """What differs between message m and the Error the doc promises (empty: none)."""
    h = m.header
    if m.type != w.MsgType.Error:
        return [f"got {m!r}, wanted Error {w.enum_name(w.ErrorCode, code)}"]
    problems = []
    if h.error_code != code:
        problems.append(f"error_code {w.enum_name(w.ErrorCode, h.error_code)}, wanted "
                        f"{w.enum_name(w.ErrorCode, code)} ({h.message})")
    if refused_type is not None and h.refused_type != refused_type:
        problems.append(f"refused_type {w.enum_name(w.MsgType, h.refused_type)}, wanted "
                        f"{w.enum_name(w.MsgType, refused_type)}")
    for field, value in (names or {}).items():
        if getattr(h, field) != value:
            problems.append(f"{field} {getattr(h, field)}, wanted {value}")
    if incarnation is not None and h.incarnation != incarnation:
        problems.append(f"incarnation {h.incarnation:#x}")
    return problems


# ---------------------------------------------------------------------------------------------
# The catalogue of malformed and refused messages


class Catalogue:
    """Each case sends something the shard must refuse and names the replies the doc promises.

    After each case a Stats request on the same connection is a barrier (a shard answers Stats
    on any connection): the case's replies and the Stats answer must come, in any order, and
    nothing else until both have. A case whose connection answers nothing but heartbeats (the
    control connection) waits for its replies only.
    """

    def __init__(self, test):
        self.t = test
        self.passed, self.failed = [], []
        self.errors = collections.Counter()  # error code name -> Error replies expected
        self.acks = collections.Counter()  # ack name -> PushAcks expected
        self.trains_cut = 0
        self.reasons, self.by_reason = {}, False
        f = test.owned[0]
        self.f, self.n = f, test.sizes[f]
        self.next_seq = test.seq[f] + 1  # a seq no push of f used yet
        self.delta = np.full(self.n, 1e-3, np.float32)
        self.frames = w.encode_fp32(self.delta)

    # -- building blocks
    def push(self, **override):
        fields = dict(self.t.identity())
        fields.update(push_fields(self.f, self.n, self.next_seq, self.t.versions[self.f]))
        fields.update(override)
        return fields

    def header(self, frames, sealed=True, **fields):
        """A push header declaring these frames (lengths and checksums), fields overridden;
        sealed=False leaves out the checksum trailer (a peer of protocol version 2)."""
        h = self.push(frame_lengths=[len(x) for x in frames],
                      frame_checksums=[w.checksum(x) for x in frames])
        h.update(fields)
        return w.build_header(sealed=sealed, **h)

    def error(self, code, refused_type=None, **names):
        self.errors[w.enum_name(w.ErrorCode, code)] += 1
        inc = self.t.incarnation

        def expect(m):
            return error_problems(m, code, refused_type, names, inc)
        return expect

    def ack(self, status, **fields):
        self.acks[w.enum_name(w.AckStatus, status)] += 1

        def expect(m):
            if m.type != w.MsgType.PushAck:
                return [f"got {m!r}, wanted PushAck {w.enum_name(w.AckStatus, status)}"]
            problems = []
            if m.header.ack != status:
                problems.append(f"ack {w.enum_name(w.AckStatus, m.header.ack)} "
                                f"({m.header.message})")
            for field, value in fields.items():
                if getattr(m.header, field) != value:
                    problems.append(f"{field} {getattr(m.header, field)}, wanted {value}")
            return problems
        return expect

    def pushed(self, **more):
        """What an Error naming the catalogue's push carries."""
        names = dict(worker_id=WORKER_A, fragment_id=self.f, seq=self.next_seq)
        names.update(more)
        return names

    def case(self, name, conn, send, expects, barrier=True):
        try:
            send()
            if barrier:
                conn.send(type=w.MsgType.Stats)
            replies, barrier_seen = [], not barrier
            deadline = time.monotonic() + REPLY_TIMEOUT_S
            while len(replies) < len(expects) or not barrier_seen:
                m = conn.recv(max(deadline - time.monotonic(), 0.001))
                if m is None:
                    break
                if barrier and m.type == w.MsgType.Stats and not barrier_seen:
                    barrier_seen = True
                else:
                    replies.append(m)
            problems = []
            if not barrier_seen:
                problems.append("no answer to the Stats barrier")
            if len(replies) != len(expects):
                problems.append(f"{len(replies)} replies, wanted {len(expects)}: {replies}")
            for m, expect in zip(replies, expects):
                problems += expect(m)
        except w.ProtocolError as e:
            problems = [f"protocol error: {e}"]
        if problems:
            self.failed.append((name, problems))
        else:
            self.passed.append(name)

    # -- the cases
    def run(self):
        t, a, f, n = self.t, self.t.data, self.f, self.n
        fr = self.frames
        good = lambda **o: self.header(fr, **o)  # noqa: E731
        M, P = w.ErrorCode, w.MsgType

        def raw(conn, frames):
            return lambda: conn.send_raw(frames)

        def fresh(**override):
            ident = t.identity()
            ident.update(override)
            return t.connect(ident)

        self.case("empty header frame -> Malformed", a, raw(a, [b""]),
                  [self.error(M.Malformed, P.Invalid)])
        self.case("garbage header bytes -> Malformed", a,
                  raw(a, [b"not a flatbuffer, just bytes" * 3]),
                  [self.error(M.Malformed, P.Invalid)])
        self.case("header over 64 KiB -> Malformed", a,
                  raw(a, [w.build_header(**self.push(type=P.Pull, message="x" * 70000))]),
                  [self.error(M.Malformed, P.Invalid)])
        empties = [b""] * (w.MAX_PAYLOAD_FRAMES + 1)
        self.case("4097 payload frames -> Malformed", a,
                  raw(a, [self.header(empties)] + empties),
                  [self.error(M.Malformed, P.Invalid)])
        self.case(f"protocol_version {w.PROTOCOL_VERSION + 1} -> BadProtocolVersion", a,
                  raw(a, [good(protocol_version=w.PROTOCOL_VERSION + 1)] + fr),
                  [self.error(M.BadProtocolVersion, P.Invalid)])
        self.case("no protocol_version (0) -> BadProtocolVersion", a,
                  raw(a, [good(protocol_version=0)] + fr),
                  [self.error(M.BadProtocolVersion, P.Invalid)])
        self.case("a peer of protocol 2 (no header trailer) -> BadProtocolVersion", a,
                  raw(a, [good(sealed=False, protocol_version=2)] + fr),
                  [self.error(M.BadProtocolVersion, P.Invalid)])
        for at in (0, len(good()) // 3, len(good()) - 1):  # root offset, a field, the trailer
            flipped = bytearray(good())
            flipped[at] ^= 0x04
            self.case(f"header byte {at} with a bit flipped -> BadChecksum naming no message",
                      a, raw(a, [bytes(flipped)] + fr),
                      [self.error(M.BadChecksum, P.Invalid, worker_id=0, fragment_id=0, seq=0)])
        self.case("type 200 -> UnknownType", a, raw(a, [good(type=200)] + fr),
                  [self.error(M.UnknownType, P.Invalid)])
        self.case("ack out of range -> Malformed", a, raw(a, [good(ack=99)] + fr),
                  [self.error(M.Malformed, P.Invalid)])
        self.case("error_code out of range -> Malformed", a,
                  raw(a, [good(error_code=999)] + fr), [self.error(M.Malformed, P.Invalid)])
        c = fresh()
        self.case("channel out of range (Hello) -> Malformed", c,
                  raw(c, [w.build_header(**self.push(type=P.Hello, channel=9))]),
                  [self.error(M.Malformed, P.Invalid)])
        self.case("chunk_index >= num_chunks -> Malformed", a,
                  raw(a, [self.header(fr[:1], num_chunks=2, chunk_index=2)] + fr[:1]),
                  [self.error(M.Malformed, P.Invalid)])
        short = [fr[0], fr[1][:-4]]
        self.case("frame length differs from frame_lengths -> BadLength", a,
                  raw(a, [good()] + short), [self.error(M.BadLength, P.Push, **self.pushed())])
        self.case("more frames than declared -> BadLength", a,
                  raw(a, [good()] + fr + [b"extra"]),
                  [self.error(M.BadLength, P.Push, **self.pushed())])
        sums = [w.checksum(x) for x in fr]
        sums[1] ^= 1
        self.case("bad checksum -> BadChecksum", a,
                  raw(a, [good(frame_checksums=sums)] + fr),
                  [self.error(M.BadChecksum, P.Push, **self.pushed())])

        def chunk(i, count=2, **o):
            frame = fr[min(i, len(fr) - 1)]
            return [self.header([frame], num_chunks=count, chunk_index=i, **o), frame]

        # A chunk's header verified before its train is checked: the Error names the push.
        train_error = lambda: self.error(M.Malformed, P.Push, **self.pushed())  # noqa: E731
        self.case("train: a later chunk with no train started -> Malformed", a,
                  raw(a, chunk(1)), [train_error()])

        def send_all(*messages):
            return lambda: [a.send_raw(m) for m in messages]

        self.case("train: chunk 2 after chunk 0 -> Malformed", a,
                  send_all(chunk(0, 3), chunk(2, 3)), [train_error()])
        self.case("train: a chunk whose seq differs from the first's -> Malformed", a,
                  send_all(chunk(0), chunk(1, seq=self.next_seq + 1)),
                  [self.error(M.Malformed, P.Push, **self.pushed(seq=self.next_seq + 1))])
        self.case("train: a chunk of two payload frames -> Malformed", a,
                  raw(a, [self.header(fr, num_chunks=2, chunk_index=0)] + fr),
                  [train_error()])
        self.trains_cut += 1
        self.case("train cut by a whole message: no reply, dropped", a, raw(a, chunk(0)), [])
        self.trains_cut += 2
        self.case("train: a second first chunk starts a new train: no reply", a,
                  send_all(chunk(0), chunk(0)), [])

        self.case("wrong plan fingerprint (Push) -> WrongPlan", a,
                  raw(a, [good(plan_fingerprint=t.plan.fingerprint ^ 1)] + fr),
                  [self.error(M.WrongPlan, P.Push, **self.pushed())])
        self.case("wrong model fingerprint (Push) -> WrongModel", a,
                  raw(a, [good(model_fingerprint=t.plan.model_fingerprint ^ 1)] + fr),
                  [self.error(M.WrongModel, P.Push, **self.pushed())])
        c = fresh(plan_fingerprint=t.plan.fingerprint + 1)
        self.case("wrong plan fingerprint (Hello) -> WrongPlan", c,
                  lambda: c.send(type=P.Hello, channel=w.Channel.Data),
                  [self.error(M.WrongPlan, P.Hello, worker_id=WORKER_A)])
        c = fresh(model_fingerprint=t.plan.model_fingerprint + 1)
        self.case("wrong model fingerprint (Hello) -> WrongModel", c,
                  lambda: c.send(type=P.Hello, channel=w.Channel.Data),
                  [self.error(M.WrongModel, P.Hello, worker_id=WORKER_A)])
        c = fresh()
        self.case("push before Hello on a fresh connection -> BadIdentity", c,
                  raw(c, [good()] + fr), [self.error(M.BadIdentity, P.Push, **self.pushed())])
        self.case("another worker's id on a bound connection -> BadIdentity", a,
                  raw(a, [good(worker_id=WORKER_OTHER)] + fr),
                  [self.error(M.BadIdentity, P.Push, **self.pushed(worker_id=WORKER_OTHER))])
        self.case("an older generation on a bound connection -> BadIdentity", a,
                  raw(a, [good(generation=t.generation - 1)] + fr),
                  [self.error(M.BadIdentity, P.Push, **self.pushed())])
        c = fresh(generation=t.generation - 1)
        self.case("Hello of an older generation -> BadIdentity", c,
                  lambda: c.send(type=P.Hello, channel=w.Channel.Data),
                  [self.error(M.BadIdentity, P.Hello, worker_id=WORKER_A)])
        c = fresh(worker_id=WORKER_OTHER)
        self.case("control Hello of a worker unknown on data -> BadIdentity", c,
                  lambda: c.send(type=P.Hello, channel=w.Channel.Control),
                  [self.error(M.BadIdentity, P.Hello, worker_id=WORKER_OTHER)])
        self.case("Pull on a control connection -> BadIdentity", t.control,
                  lambda: t.control.send(type=P.Pull, fragment_id=f),
                  [self.error(M.BadIdentity, P.Pull, worker_id=WORKER_A, fragment_id=f)],
                  barrier=False)

        unknown = FRAGMENTS + 3
        self.case("Push of an unknown fragment -> UnknownFragment", a,
                  raw(a, [good(fragment_id=unknown)] + fr),
                  [self.error(M.UnknownFragment, P.Push, **self.pushed(fragment_id=unknown))])
        self.case("Pull of an unknown fragment -> UnknownFragment", a,
                  lambda: a.send(type=P.Pull, fragment_id=unknown),
                  [self.error(M.UnknownFragment, P.Pull, worker_id=WORKER_A,
                              fragment_id=unknown)])
        self.case("codec 9 -> BadCodec", a, raw(a, [good(codec=9)] + fr),
                  [self.error(M.BadCodec, P.Push, **self.pushed())])
        bad_block = w.encode_int8(self.delta, 128)
        self.case("int8 block 100 (not a multiple of 8) -> BadCodec", a,
                  raw(a, [self.header(bad_block, codec=w.CODEC_INT8, block=100,
                                      chunk_elements=w.chunk_elements(100))] + bad_block),
                  [self.error(M.BadCodec, P.Push, **self.pushed())])
        self.case("int8 block 4096 (above 2048) -> BadCodec", a,
                  raw(a, [self.header(bad_block, codec=w.CODEC_INT8, block=4096,
                                      chunk_elements=w.chunk_elements(4096))] + bad_block),
                  [self.error(M.BadCodec, P.Push, **self.pushed())])
        self.case("num_elements one more than the fragment -> BadLength", a,
                  raw(a, [good(num_elements=n + 1)] + fr),
                  [self.error(M.BadLength, P.Push, **self.pushed())])
        self.case("chunk_elements not ChunkElements(block) -> BadLength", a,
                  raw(a, [good(chunk_elements=w.chunk_elements(256) // 2)] + fr),
                  [self.error(M.BadLength, P.Push, **self.pushed())])
        whole = [w.encode_fp32(self.delta, 1 << 30)[0]]  # one frame of every value
        self.case("chunk layout: one frame for a two-chunk payload -> BadLength", a,
                  raw(a, [self.header(whole)] + whole),
                  [self.error(M.BadLength, P.Push, **self.pushed())])
        self.case("push with tokens 0 -> Malformed", a, raw(a, [good(tokens=0)] + fr),
                  [self.error(M.Malformed, P.Push, **self.pushed())])
        self.case("push with steps 0 -> Malformed", a, raw(a, [good(steps=0)] + fr),
                  [self.error(M.Malformed, P.Push, **self.pushed())])
        for sent in (P.Welcome, P.Error, P.PushAck, P.FragmentUpdate):
            self.case(f"{w.enum_name(P, sent)} sent to a shard -> UnknownType", a,
                      lambda sent=sent: a.send(type=sent, fragment_id=f),
                      [self.error(M.UnknownType, sent, worker_id=WORKER_A)])
        # Type Invalid is refused with the out-of-range types, before the header counts as
        # parsed: the Error names no message.
        self.case("type Invalid (0) -> UnknownType", a, raw(a, [good(type=P.Invalid)] + fr),
                  [self.error(M.UnknownType, P.Invalid, worker_id=0)])

        self.case("InitFragment of an initialized fragment -> AlreadyInitialized", a,
                  lambda: a.send(w.encode_fp32(np.zeros(n, np.float32)),
                                 type=P.InitFragment, fragment_id=f, seq=0, codec=0,
                                 block=256, num_elements=n, chunk_elements=w.chunk_elements(256)),
                  [self.ack(w.AckStatus.AlreadyInitialized, fragment_id=f)])
        last = t.seq[f]
        self.case("resent last applied push -> Duplicate", a,
                  raw(a, [good(seq=last)] + fr), [self.ack(w.AckStatus.Duplicate, seq=last)])
        self.case(f"base_version {MAX_STALENESS + 1} behind -> Stale", a,
                  raw(a, [good(base_version=t.versions[f] - MAX_STALENESS - 1)] + fr),
                  [self.ack(w.AckStatus.Stale, fragment_id=f, seq=self.next_seq)])
        self.case("base_version ahead of the shard -> Stale", a,
                  raw(a, [good(base_version=t.versions[f] + 3)] + fr),
                  [self.ack(w.AckStatus.Stale, fragment_id=f, seq=self.next_seq)])

    def check_stats(self, before, after):
        def grew(key):
            return after[key] - before[key]

        refusals = sum(self.errors.values())
        check(grew("bad_messages") == refusals,
              f"bad_messages grew by {grew('bad_messages')}, {refusals} refusals sent")
        reasons = collections.Counter(after["refused_by_reason"])
        reasons.subtract(before["refused_by_reason"])
        reasons = +reasons
        check(sum(reasons.values()) == refusals,
              f"refused_by_reason grew by {dict(reasons)}, refusals sent {dict(self.errors)}")
        # The doc names refused_by_reason but not its keys: compared by reason only if every
        # key is an ErrorCode name.
        if all(hasattr(w.ErrorCode, k) for k in reasons):
            check(reasons == +self.errors,
                  f"refused_by_reason grew by {dict(reasons)}, refusals sent {dict(self.errors)}")
            self.by_reason = True
        self.reasons = dict(reasons)
        for name in ("stale", "duplicate"):
            got = after["pushes"][name] - before["pushes"][name]
            want = self.acks[name.capitalize()]
            check(got == want, f"pushes.{name} grew by {got}, wanted {want}")
        check(grew("trains_cut") >= self.trains_cut,
              f"trains_cut grew by {grew('trains_cut')}, at least {self.trains_cut} cut")
        check(after["partial_trains"] == 0, f"partial_trains {after['partial_trains']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the diloco-server binary")
    parser.add_argument("--generated", required=True, help="flatc --python output directory")
    args = parser.parse_args()
    w.load_schema(args.generated)

    def on_alarm(signum, frame):
        raise TimeoutError(f"the test ran past {TIME_LIMIT_S} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TIME_LIMIT_S)

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="protocol_client_test.") as workdir:
        server = Server(args.server, workdir)
        test = None
        try:
            test = ClientTest(server.endpoint())
            test.join()
            test.initialize()
            test.pull_theta0()
            test.rounds()
            test.catalogue()
            test.open_push()
            test.leave()
            check(server.proc.poll() is None, "diloco-server exited during the test")
        except Exception as e:  # noqa: BLE001: every problem fails the test, with the log
            if not isinstance(e, (TestFailure, TimeoutError, w.ProtocolError)):
                traceback.print_exc()
            print(f"FAIL: {e}")
            server.stop()
            print("--- diloco-server log (tail) ---")
            print(server.log_tail())
            return 1
        finally:
            signal.alarm(0)
            if test is not None:
                test.close()
            server.stop()
    print(f"PASS: {test.rounds_checked} rounds checked against torch SGD(nesterov) "
          f"(max relative error {test.max_rel_error:.3g}, tolerance {REL_TOL:g}); "
          f"{len(test.kinds_passed)} malformed/refused kinds passed; "
          f"{sum(c.heartbeats_seen for c in test.connections)} shard heartbeats seen; "
          f"{time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
