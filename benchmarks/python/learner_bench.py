#!/usr/bin/env python3
"""What the Python learner (diloco_ps) costs a PyTorch training loop, at GPT-2 124M size on the
CPU, against one shard on 127.0.0.1 serving --model=gpt2-124m (4 fragments, streaming).

  --mode=idle   after_step's cost on the steps with nothing due (no training in between: the
                learner does the same work either way), then the first due step (a push: one
                fragment copied down) and the step that adopts its answer (the fragment copied
                down and up). Its peer is a bare Python call (the floor of any per-step hook).
  --mode=train  the same GPT-2 trained (AdamW, batch x seq tokens) --steps steps without the
                learner, then --steps steps with it at H = --inner_steps; prints both rates and
                utilization = steps/s with the learner / steps/s without.

  PYTHONPATH= /usr/bin/python3 benchmarks/python/learner_bench.py --build=BUILD \\
      --python_dir=BUILD/python --mode=idle [--dtype=bfloat16]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, f"{ROOT}/tests/python")
sys.path.insert(0, f"{ROOT}/python/examples")


def us(values):
    s = sorted(values)
    return (f"median {statistics.median(s):.1f} us, p90 {s[int(0.9 * (len(s) - 1))]:.1f} us, "
            f"max {s[-1]:.1f} us over {len(s)} steps")


def timed_steps(model, opt, steps, batch, seq, learner=None):
    gen = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for _ in range(steps):
        window = torch.randint(0, 50257, (batch, seq + 1), generator=gen)
        loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if learner is not None:
            learner.after_step(tokens=batch * seq)
    return steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    ap.add_argument("--mode", choices=["idle", "train"], default="idle")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--inner_steps", type=int, default=100)
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200, help="train: steps per run")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    from fleet import Shard, import_diloco_ps
    ps = import_diloco_ps(a.python_dir)
    from gpt2_learner import GPT  # the C++ worker's GPT-2 with GptManifest's names
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(12, 12, 768, 50257, 1024).to(getattr(torch, a.dtype))
    n = sum(p.numel() for p in model.parameters())
    tmp = tempfile.mkdtemp(prefix="diloco-pybench.")
    print(f"GPT-2 124M ({n} parameters, {a.dtype}, CPU), H={a.inner_steps}, "
          f"{a.fragments} fragments, streaming", flush=True)
    with Shard(a.build, tmp, ["--model=gpt2-124m", f"--fragments={a.fragments}",
                              "--grace_cap=1s"]) as shard:
        if a.mode == "train":
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            timed_steps(model, opt, 2, a.batch, a.seq)  # warm-up, not counted
            peer = timed_steps(model, opt, a.steps, a.batch, a.seq)
            print(f"without the learner: {peer:.4f} steps/s", flush=True)
        learner = ps.Learner(servers=shard.endpoint, worker_id=1,
                             params=model.named_parameters(), fragments=a.fragments,
                             inner_steps=a.inner_steps)
        t0 = time.perf_counter()
        learner.join(timeout=600)
        print(f"join (theta(0) uploaded, whole model down and up): "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
        if a.mode == "train":
            with_learner = timed_steps(model, opt, a.steps, a.batch, a.seq, learner)
            st = learner.stats
            print(f"with the learner: {with_learner:.4f} steps/s; pushes {st['pushes']} "
                  f"adoptions {st['adoptions']}", flush=True)
            print(f"peer {peer:.4f} steps/s, ratio (utilization) {with_learner / peer:.4f}")
            return 0
        idle = []
        for _ in range(a.inner_steps - 1):  # fragment 0 is first due at step H
            t = time.perf_counter()
            learner.after_step(tokens=a.batch * a.seq)
            idle.append((time.perf_counter() - t) * 1e6)
        bare = []
        noop = lambda tokens: None  # noqa: E731
        for _ in range(1000):
            t = time.perf_counter()
            noop(tokens=a.batch * a.seq)
            bare.append((time.perf_counter() - t) * 1e6)
        print(f"after_step, nothing due: {us(idle)}")
        print(f"peer (a bare Python call): {us(bare)}")
        print(f"ratio (median after_step / median bare call): "
              f"{statistics.median(idle) / statistics.median(bare):.1f}")
        st0 = learner.stats
        t = time.perf_counter()
        learner.after_step(tokens=a.batch * a.seq)
        st = learner.stats
        print(f"step {a.inner_steps}, fragment 0 pushed: {(time.perf_counter() - t) * 1e3:.1f} "
              f"ms (down {(st['fetch_us'] - st0['fetch_us']) / 1e3:.1f} ms, "
              f"{st['fetched_fragments'] - st0['fetched_fragments']} fragment; up "
              f"{st['stored_fragments'] - st0['stored_fragments']})", flush=True)
        end = time.time() + 300
        while learner.stats["adoptions"] == st["adoptions"] and time.time() < end:
            time.sleep(0.2)
            t = time.perf_counter()
            learner.after_step(tokens=a.batch * a.seq)
            dt = time.perf_counter() - t
        st2 = learner.stats
        print(f"the step adopting it: {dt * 1e3:.1f} ms (down "
              f"{(st2['fetch_us'] - st['fetch_us']) / 1e3:.1f} ms, "
              f"up {(st2['store_us'] - st['store_us']) / 1e3:.1f} ms; "
              f"written: {sum(s.stop - s.start for _, s in learner.last_written())} values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
