#!/usr/bin/env python3
"""diloco_ps.Island: two gloo ranks training one DDP model push as ONE learner, and stay
identical.

Two shards on 127.0.0.1 (--shard=0/1 --shards=2) serve the manifest of a small MLP
(diloco_ps.write_manifest; the model and task of tests/python/mlp_learner.py) with quorum 2, a
long grace cap and an audit log. One island of 2 ranks (two processes of this file,
init_method tcp://127.0.0.1:PORT, gloo, DistributedDataParallel, each rank its own batches)
and one single-process learner, both lockstep with streaming (H = 8, 4 fragments: fragment i
is pushed at step 8 + 2i, then every 8 steps, and adopted at the same step), so every round
holds one push of each and the run does not depend on timing. The island joins first
(theta(0) is its model), neither trains before both joined. 64 steps, then drain. Checked:
  - one worker: each shard saw 2 workers (`diloco-ctl stats`), the audit logs hold applied
    pushes from the island's id and the single learner's only, as many from the island as its
    learner pushed, and only rank 0 holds a learner;
  - every push applied, none refused; the steps on which the island wrote are exactly its push
    steps, each writing one fragment (the broadcast carries that fragment's bytes, a step with
    nothing written broadcasts no data, only the header);
  - identical parameters: diloco_ps checksums of both ranks' parameters equal after the join,
    after every step that wrote, and after the drain, and the adoptions changed them;
    Island.checksums() gives both ranks the pair of them after the drain;
  - the global model's held-out loss (rank 0's learner.global_params()) at most 0.8 of
    theta(0)'s;
  - a rank-0 join failure raises on every rank: an island of a wider MLP joining the same
    shards is refused; both ranks raise RuntimeError carrying the shard's reason within 30 s
    (the process group's timeout is 120 s, so waiting for it would fail this);
  - an island whose rank 1 holds another model than rank 0 (plain modules, no DDP) raises
    ValueError naming rank 1 on both ranks at construction;
  - the control: the same island with the parameter broadcast switched off (Island._broadcast
    a no-op; one shard, quorum 1, 16 steps) ends with the ranks' checksums differing from the
    first adoption on, so the identical-parameters check above can fail;
  - every rank process exits (rc 0) within its bound. Each rank's main thread (and the gloo
    threads it starts) runs on one CPU of its own, and ranks end as users' programs do
    (destroy_process_group, then the DDP module freed): a tensor left to a gloo worker thread to
    free would hang such a process at exit every time (python/diloco_ps/_held.py), not once in
    a while as it did in CI.
Prints the median cost of after_step on steps with nothing written, per rank.

  /usr/bin/python3 island_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch, or torch without gloo).
"""
import argparse
import copy
import datetime
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("SKIP: this torch has no torch.distributed with gloo")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fleet import import_diloco_ps, verdict, wait_for_file  # noqa: E402
from mlp_learner import CLASSES, HIDDEN, IN, held_out_loss, teacher_batch  # noqa: E402

H, FRAGMENTS, STEPS, BATCH, LR = 8, 4, 64, 32, 3e-3
ISLAND_ID, SINGLE_ID, WRONG_ID = 1, 2, 9


def make_model(hidden=HIDDEN):
    return torch.nn.Sequential(torch.nn.Linear(IN, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, CLASSES))


def wait_go(go_file):
    end = time.time() + 120
    while go_file and not os.path.exists(go_file):
        if time.time() > end:
            sys.exit(f"{go_file} did not appear")
        time.sleep(0.01)


# --- one rank of an island (a process of this file) ----------------------------------------

def rank_main(a):
    os.sched_setaffinity(0, {a.cpu})  # this thread, and the threads it starts from here on
    ps = import_diloco_ps(a.python_dir)
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    t_start = time.time()
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=120))
    print(f"process group in {time.time() - t_start:.1f} s", flush=True)
    torch.manual_seed(a.seed)  # the same initialisation on every rank (DDP sends rank 0's too)
    model = make_model(a.hidden + (8 if a.mode == "mismatch" and a.rank == 1 else 0))
    # (DDP compares the ranks' shapes itself: the mismatch hands the Island the plain module.)
    ddp = model if a.mode == "mismatch" else DistributedDataParallel(model)
    if a.mode == "no_broadcast":  # the control: the ranks are left to DDP alone
        ps.Island._broadcast = lambda self, ranges: None
    out = {"rank": a.rank}

    def done():
        json.dump(out, open(a.out + ".tmp", "w"))
        os.replace(a.out + ".tmp", a.out)
        dist.destroy_process_group()

    t_island = time.time()
    try:
        island = ps.Island(servers=a.servers, worker_id=a.worker_id, params=ddp,
                           fragments=FRAGMENTS, inner_steps=H, lockstep=True, stream=True)
    except ValueError as e:
        if a.mode != "mismatch":
            raise
        out["raised"], out["message"] = type(e).__name__, str(e)
        return done()
    if a.mode == "mismatch":
        out["raised"] = None
        return done()
    out["has_learner"] = island.learner is not None
    if a.mode == "wrong_model":  # the shards serve another model: rank 0's join is refused
        t0 = time.time()
        try:
            island.join(timeout=30)
            out["raised"] = None
        except Exception as e:  # noqa: BLE001 - what was raised is the result
            out["raised"], out["message"] = type(e).__name__, str(e)
        out["seconds"] = time.time() - t0
        return done()

    island.join(timeout=60)
    print(f"island constructed and joined in {time.time() - t_island:.1f} s", flush=True)
    out["join"] = {"checksum": island.checksum(), "written": len(island.last_written())}
    x_eval, y_eval = teacher_batch(torch.Generator().manual_seed(999), 4096)
    out["start_loss"] = held_out_loss(model, x_eval, y_eval)
    print("joined", flush=True)
    wait_go(a.go_file)
    opt = torch.optim.AdamW(ddp.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(a.seed + 1000 * (a.rank + 1))  # this rank's batches
    steps, idle_us = [], []
    for step in range(1, a.steps + 1):
        x, y = teacher_batch(gen, BATCH)
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        before = dict(island.counters)
        t0 = time.perf_counter()
        written = island.after_step(tokens=BATCH * a.world)
        dt = time.perf_counter() - t0
        c = island.counters
        row = {"step": step, "elements": sum(s.stop - s.start for _, s in written),
               "data_bytes": c["data_bytes"] - before["data_bytes"],
               "header_bytes": c["header_bytes"] - before["header_bytes"]}
        if written:
            row["checksum"] = island.checksum()
            row["fragments"] = [f for f, frag in enumerate(island.fragments())
                                if all(r in written for r in frag)]
        else:
            idle_us.append(dt * 1e6)
        steps.append(row)
    island.drain(timeout=30)
    out["checksums"] = island.checksums()
    out.update(steps=steps, idle_us=statistics.median(idle_us), train_loss=loss.item(),
               drain={"checksum": island.checksum(), "written": len(island.last_written())},
               counters=island.counters,
               fragment_elements=[sum(s.stop - s.start for _, s in frag)
                                  for frag in island.fragments()],
               model_elements=sum(p.numel() for p in model.parameters()))
    if island.learner is not None:
        out["stats"] = {k: v for k, v in island.learner.stats.items() if k != "versions"}
        g = copy.deepcopy(model)
        torch.nn.utils.vector_to_parameters(island.learner.global_params(), g.parameters())
        out["global_loss"] = held_out_loss(g, x_eval, y_eval)
    done()


# --- the single-process learner --------------------------------------------------------------

def single_main(a):
    ps = import_diloco_ps(a.python_dir)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed + 1)
    model = make_model()
    learner = ps.Learner(servers=a.servers, worker_id=a.worker_id,
                         params=model.named_parameters(), fragments=FRAGMENTS, inner_steps=H,
                         lockstep=True, stream=True)
    learner.join(timeout=60)
    print("joined", flush=True)
    wait_go(a.go_file)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(a.seed + 7)
    for _ in range(a.steps):
        x, y = teacher_batch(gen, BATCH)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        learner.after_step(tokens=BATCH)
    learner.drain(timeout=30)
    out = {k: v for k, v in learner.stats.items() if k != "versions"}
    json.dump(out, open(a.out + ".tmp", "w"))
    os.replace(a.out + ".tmp", a.out)


# --- the test ----------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shards:
    """`n` diloco-server shards (--shard=i --shards=n) with `args`, logs TMP/NAME-i.log, audit
    logs TMP/NAME-i.audit.jsonl; stopped by PID (SIGTERM, then SIGKILL)."""

    def __init__(self, build, tmp, n, args, name="shard"):
        self.procs, self.endpoints, self.audits = [], [], []
        try:
            for i in range(n):
                port, log = f"{tmp}/{name}-{i}.port", f"{tmp}/{name}-{i}.log"
                self.audits.append(f"{tmp}/{name}-{i}.audit.jsonl")
                self.procs.append(subprocess.Popen(
                    [f"{build}/server/diloco-server", f"--shard={i}", f"--shards={n}",
                     "--bind=tcp://127.0.0.1:*", f"--port_file={port}", "--worker_timeout=30s",
                     "--progress_interval=1000s", f"--audit_jsonl={self.audits[-1]}", *args],
                    stdout=open(log, "w"), stderr=subprocess.STDOUT))
                try:
                    self.endpoints.append(wait_for_file(port, 20))
                except AssertionError:
                    raise AssertionError("a shard did not start:\n" + open(log).read())
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Procs:
    """Processes of this file, each with a log and a JSON result file; killed by PID at exit."""

    def __init__(self, a, tmp):
        self.a, self.tmp, self.procs = a, tmp, []

    def start(self, name, *args):
        log, out = f"{self.tmp}/{name}.log", f"{self.tmp}/{name}.json"
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                              f"--python_dir={self.a.python_dir}", f"--build={self.a.build}",
                              f"--out={out}", *args],
                             stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        return name, log, out, p

    def island(self, name, servers, worker_id, *args):
        init = f"tcp://127.0.0.1:{free_port()}"
        cpus = sorted(os.sched_getaffinity(0))
        return [self.start(f"{name}-rank{r}", "--role=rank", f"--rank={r}", "--world=2",
                           f"--cpu={cpus[r % len(cpus)]}",
                           f"--init={init}", f"--servers={servers}",
                           f"--worker_id={worker_id}", *args) for r in range(2)]

    @staticmethod
    def wait_joined(proc, timeout=240):
        name, log, _, p = proc
        end = time.time() + timeout
        while "joined" not in open(log).read():
            if p.poll() is not None or time.time() > end:
                raise AssertionError(f"{name} did not join:\n{open(log).read()[-3000:]}")
            time.sleep(0.05)

    @staticmethod
    def result(proc, timeout, failures):
        name, log, out, p = proc
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = "timeout"
        if rc != 0 or not os.path.exists(out):
            failures.append(f"{name}: exit {rc}\n{open(log).read()[-3000:]}")
            print("  FAIL:", failures[-1], flush=True)
            return None
        return json.load(open(out))

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def expected_pushes():
    """Lockstep with streaming: fragment f is pushed at H + f * H / FRAGMENTS, then every H."""
    return sorted((s, f) for f in range(FRAGMENTS)
                  for s in range(H + f * H // FRAGMENTS, STEPS + 1, H))


def check_island(ranks, single, check):
    r0, r1 = ranks
    check(r0["has_learner"] and not r1["has_learner"], "only rank 0 holds a learner")
    st = r0["stats"]
    pushes = expected_pushes()
    print(f"island: pushes {st['pushes']} applied {st['applied']} adoptions {st['adoptions']} "
          f"refused {st['refused']}; single learner: pushes {single['pushes']} applied "
          f"{single['applied']}")
    check(st["pushes"] == st["applied"] == len(pushes) and st["refused"] == 0,
          f"island pushes {st['pushes']} applied {st['applied']} refused {st['refused']}, "
          f"expected {len(pushes)} applied")
    check(single["pushes"] == single["applied"] == len(pushes) and single["refused"] == 0,
          f"single learner pushes {single['pushes']} applied {single['applied']}")
    header = (1 + FRAGMENTS) * 8
    for r in ranks:
        name = f"rank {r['rank']}"
        written = [(row["step"], row["fragments"]) for row in r["steps"] if row["elements"]]
        check(written == [(s, [f]) for s, f in pushes],
              f"{name}: wrote at (step, fragments) {written}, pushes at {pushes}")
        check(all(row["data_bytes"] == 4 * row["elements"] and row["header_bytes"] == header
                  for row in r["steps"]),
              f"{name}: a step broadcast other than its header and the ranges it wrote")
        check(all(row["elements"] == r["fragment_elements"][row["fragments"][0]]
                  for row in r["steps"] if row["elements"]),
              f"{name}: a step wrote more than its fragment")
        check(r["join"]["written"] > 0 and r["drain"]["written"] > 0 and
              r["counters"]["data_bytes"] ==
              4 * (2 * r["model_elements"] + sum(row["elements"] for row in r["steps"])),
              f"{name}: join and drain do not broadcast the whole model once each: "
              f"{r['counters']}")
    # Identical parameters on both ranks after the join, every write, the drain.
    c0 = [r0["join"]["checksum"]] + [row.get("checksum") for row in r0["steps"]] + \
         [r0["drain"]["checksum"]]
    c1 = [r1["join"]["checksum"]] + [row.get("checksum") for row in r1["steps"]] + \
         [r1["drain"]["checksum"]]
    same = sum(1 for a, b in zip(c0, c1) if a is not None and a == b)
    compared = sum(1 for a in c0 if a is not None)
    print(f"checksums: {same} of {compared} points equal across the ranks (join, "
          f"{compared - 2} adoptions, drain)")
    where = ["join"] + [f"step {i}" for i in range(1, len(c0) - 1)] + ["drain"]
    check(r0["checksums"] == r1["checksums"] == [c0[-1], c1[-1]],
          f"Island.checksums() after the drain: {r0['checksums']} on rank 0, "
          f"{r1['checksums']} on rank 1; each rank's own: {c0[-1]}, {c1[-1]}")
    check(c0 == c1, "the ranks' parameters differ (rank 0 vs rank 1): " + ", ".join(
        f"after the {w}: {a} vs {b}" for w, a, b in zip(where, c0, c1) if a != b))
    check(len({c for c in c0 if c is not None}) > len(pushes) // 2,
          "the adoptions did not change the parameters")
    print(f"global model held-out loss {r0['start_loss']:.4f} -> {r0['global_loss']:.4f} "
          f"(last training loss {r0['train_loss']:.4f})")
    check(r0["global_loss"] <= 0.8 * r0["start_loss"],
          f"the global model's loss did not fall: {r0['start_loss']:.4f} -> "
          f"{r0['global_loss']:.4f}")
    print(f"after_step with nothing written: median {r0['idle_us']:.0f} us on rank 0, "
          f"{r1['idle_us']:.0f} us on rank 1 (one {header}-byte broadcast, no data)")


def check_shards(a, shards, check):
    for i, endpoint in enumerate(shards.endpoints):
        out = subprocess.run([f"{a.build}/ctl/diloco-ctl", "stats", f"--server={endpoint}"],
                             capture_output=True, text=True, timeout=30)
        stats = json.loads(out.stdout) if out.returncode == 0 else {}
        check(stats.get("workers") == 2,
              f"shard {i}: {stats.get('workers')} workers, expected 2 (the island, the single "
              f"learner): {out.stdout}{out.stderr}")


def check_audit(shards, island_pushes, check):
    by_worker = {}
    for path in shards.audits:
        for line in open(path):
            ev = json.loads(line)
            if ev.get("event") == "applied":
                by_worker[ev["worker"]] = by_worker.get(ev["worker"], 0) + 1
    print(f"applied pushes by worker id (audit logs): {by_worker}")
    check(set(by_worker) == {ISLAND_ID, SINGLE_ID} and by_worker[ISLAND_ID] == island_pushes,
          f"applied pushes by worker {by_worker}: expected ids {ISLAND_ID} (the island, "
          f"{island_pushes}) and {SINGLE_ID} only")


def run_fleet(a, tmp, procs, shards, check, failures, said):
    """The island and the single learner, then an island of a wider model; the ranks' results."""
    servers = ",".join(shards.endpoints)
    go = f"--go_file={tmp}/go"
    island = procs.island("island", servers, ISLAND_ID, go)
    procs.wait_joined(island[0])  # theta(0) is the island's model
    single = procs.start("single", "--role=single", f"--servers={servers}",
                         f"--worker_id={SINGLE_ID}", go)
    procs.wait_joined(single)
    procs.wait_joined(island[1])
    said("the island and the single learner joined")
    open(f"{tmp}/go", "w").close()
    ranks = [procs.result(p, 300, failures) for p in island]
    single_out = procs.result(single, 300, failures)
    said("trained and drained")
    if None not in ranks and single_out is not None:
        check_island(ranks, single_out, check)
        check_shards(a, shards, check)

    # A model the shards do not serve: rank 0's join is refused, every rank raises.
    wrong = procs.island("wrong", servers, WRONG_ID, "--mode=wrong_model",
                         f"--hidden={HIDDEN + 8}")
    for r, out in enumerate(procs.result(p, 120, failures) for p in wrong):
        if out is None:
            continue
        print(f"wrong model, rank {r}: raised {out['raised']} after "
              f"{out['seconds']:.1f} s: {str(out.get('message'))[:160]}")
        check(out["raised"] == "RuntimeError" and out["seconds"] < 30 and
              ("WrongModel" in out["message"] or "WrongPlan" in out["message"]),
              f"wrong model, rank {r}: {out}")
    said("the refused island done")
    return ranks


def check_control(results, check):
    c0, c1 = results
    if c0 is None or c1 is None:
        return
    first = [(row["step"], row.get("checksum")) for row in c0["steps"] if row["elements"]]
    other = {row["step"]: row.get("checksum") for row in c1["steps"]}
    differ = [s for s, c in first if other.get(s) != c]
    print(f"control (no broadcast): checksums differ at {len(differ)} of {len(first)} adoption "
          f"steps, and after the drain: {c0['drain']['checksum'] != c1['drain']['checksum']}")
    check(first and differ and differ[0] == first[0][0] and
          c0["drain"]["checksum"] != c1["drain"]["checksum"] and
          c0["join"]["checksum"] == c1["join"]["checksum"],
          f"without the broadcast the ranks did not part at the first adoption: {first} vs "
          f"{other}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    ap.add_argument("--role", choices=["test", "rank", "single"], default="test")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=0, help="a rank's CPU")
    ap.add_argument("--init", default="")
    ap.add_argument("--servers", default="")
    ap.add_argument("--worker_id", type=int, default=0)
    ap.add_argument("--mode", default="train",
                    choices=["train", "wrong_model", "no_broadcast", "mismatch"])
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--go_file", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.role == "rank":
        return rank_main(a)
    if a.role == "single":
        return single_main(a)

    ps = import_diloco_ps(a.python_dir)
    tmp = tempfile.mkdtemp(prefix="diloco-island.")
    ps.write_manifest(make_model(), f"{tmp}/mlp.json")
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("  FAIL:", what, flush=True)

    procs = Procs(a, tmp)
    t0 = time.time()

    def said(what):
        print(f"[{time.time() - t0:5.1f} s] {what}", flush=True)

    ranks = [None]
    try:
        # The control, alongside: without the parameter broadcast, the ranks part at the first
        # adoption (one shard of its own, quorum 1).
        with Shards(a.build, tmp, 1, [f"--model=manifest:{tmp}/mlp.json",
                                      f"--fragments={FRAGMENTS}"], name="control") as control:
            runs = procs.island("control", control.endpoints[0], ISLAND_ID,
                                "--mode=no_broadcast", f"--steps={2 * H}")
            # Rank 1 holds a wider model than rank 0: the construction raises on both ranks.
            mismatch = procs.island("mismatch", control.endpoints[0], WRONG_ID,
                                    "--mode=mismatch")
            with Shards(a.build, tmp, 2, [f"--model=manifest:{tmp}/mlp.json",
                                          f"--fragments={FRAGMENTS}", "--quorum=2",
                                          "--grace_cap=60s"]) as shards:
                ranks = run_fleet(a, tmp, procs, shards, check, failures, said)
            said("shards stopped")
            if None not in ranks:
                check_audit(shards, ranks[0]["stats"]["pushes"], check)
            check_control([procs.result(p, 300, failures) for p in runs], check)
            for r, out in enumerate(procs.result(p, 120, failures) for p in mismatch):
                if out is not None:
                    print(f"ranks of different models, rank {r}: raised {out['raised']}: "
                          f"{str(out.get('message'))[:160]}")
                    check(out["raised"] == "ValueError" and
                          "rank 1: its parameters" in out["message"],
                          f"ranks of different models, rank {r}: {out}")
            said("control done")
    finally:
        procs.kill()
    return verdict(len(failures), tmp)


if __name__ == "__main__":
    sys.exit(main())
