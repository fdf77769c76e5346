#!/usr/bin/env python3
"""One rank of a PyTorch island (diloco_ps.Island) across nodes, as learner.sbatch starts it.

Every rank runs this with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the
recipe derives them from Slurm's): gloo over the LAN, the GPT of python/examples/gpt2_learner.py
(the C++ worker's model, names and layout, so the same shards serve both) under
DistributedDataParallel, rank 0's learner the island's only link to the shards, with CURVE keys.
It trains for --duration seconds (rank 0's clock decides, so every rank stops at the same step),
drains, and writes JSON lines to --metrics_jsonl (".rankR" added for ranks after 0, as
diloco-worker does): rank 0 a "progress" line every --progress_s
(wall time "t", the learner's pushes, applied, adoptions) and every rank a "done" line with its
parameter checksum ("params_checksum") after the drain. Exits 1 if the ranks' checksums differ.
"""
import argparse
import datetime
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import diloco_ps

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python", "examples"))
import gpt2_learner  # noqa: E402


def curve_options(a):
    """The Learner's CURVE keyword arguments, refused clearly by a build without them (the
    options are LearnerOptions' keywords; older builds named them in Learner's signature)."""
    if hasattr(diloco_ps, "LearnerOptions"):
        accepted = diloco_ps.LearnerOptions().keywords()
    else:
        accepted = inspect.signature(diloco_ps.Learner.__init__).parameters
    wanted = {"curve_server_key": a.server_key, "curve_secret_key_file": a.secret_key}
    missing = [k for k, v in wanted.items() if v and k not in accepted]
    if missing:
        sys.exit(f"torch_island.py: this diloco_ps.Learner takes no {', '.join(missing)}; "
                 "a CURVE shard cannot be joined without keys")
    return {k: v for k, v in wanted.items() if v}


def tokens_of(a, vocab):
    fd, path = tempfile.mkstemp(suffix=".bin")
    os.close(fd)
    try:
        subprocess.run([a.ctl, "gen-data", f"--out={path}", "--worker=0", "--workers=1",
                        "--tokens=1000000"], check=True,
                       stdout=subprocess.DEVNULL)
        tokens = gpt2_learner.read_bin(path)
    finally:
        os.unlink(path)
    if int(tokens.max()) >= vocab:
        sys.exit(f"torch_island.py: token {int(tokens.max())} is outside the vocabulary {vocab}")
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--worker_id", type=int, required=True)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--server_key", default="", help="the shards' public key (z85 or a file)")
    ap.add_argument("--secret_key", default="", help="this learner's secret key file")
    ap.add_argument("--codec", default="int8:256")
    ap.add_argument("--inner_steps", type=int, default=50)
    ap.add_argument("--duration", type=float, required=True, help="seconds of training")
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ctl", default="diloco-ctl")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--progress_s", type=float, default=2.0)
    ap.add_argument("--metrics_jsonl", default="")
    a = ap.parse_args()
    if a.model not in gpt2_learner.PRESETS:
        sys.exit(f"torch_island.py: model {a.model} is not one of gpt2_learner's presets "
                 f"{sorted(gpt2_learner.PRESETS)}")
    L, H, C, V, T = gpt2_learner.PRESETS[a.model]
    options = curve_options(a)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    path = a.metrics_jsonl + (f".rank{rank}" if rank else "")  # as diloco-worker names them
    log = open(path, "a") if a.metrics_jsonl else None

    def write(event):
        line = json.dumps(event, separators=(",", ":"))  # diloco-worker's form
        print(line, flush=True)
        if log:
            log.write(line + "\n")
            log.flush()

    torch.manual_seed(a.seed)
    model = gpt2_learner.GPT(L, H, C, V, T)
    ddp = DistributedDataParallel(model)
    island = diloco_ps.Island(servers=a.servers, worker_id=a.worker_id, params=ddp,
                              codec=a.codec, inner_steps=a.inner_steps, fragments=a.fragments,
                              **options)
    tokens = tokens_of(a, V)
    decayed = [p for p in model.parameters() if p.dim() == 2]
    others = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": others, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    island.join()
    write({"event": "joined", "t": time.time(), "worker": a.worker_id, "rank": rank,
           "params_checksum": island.checksum()})
    gen = torch.Generator().manual_seed(a.seed * 31 + a.worker_id * 1000 + rank + 1)
    deadline = time.time() + a.duration
    stop = torch.zeros(1, dtype=torch.int64)  # held for the island's life (diloco_ps/_held.py)
    step, ema, next_progress = 0, None, time.time() + a.progress_s
    while True:
        if step % 10 == 0:
            stop[0] = int(rank == 0 and time.time() >= deadline)
            dist.broadcast(stop, 0)
            if stop[0]:
                break
        starts = torch.randint(0, len(tokens) - T - 1, (a.batch,), generator=gen)
        window = torch.stack([tokens[s:s + T + 1] for s in starts.tolist()])
        loss = ddp(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        island.after_step(tokens=a.batch * T * size)
        step += 1
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if rank == 0 and time.time() >= next_progress:
            next_progress = time.time() + a.progress_s
            st = island.learner.stats
            write({"event": "progress", "t": time.time(), "worker": a.worker_id, "step": step,
                   "loss": ema, "pushes": st["pushes"], "applied": st["applied"],
                   "adoptions": st["adoptions"]})
    island.drain()
    sums = island.checksums()
    done = {"event": "done", "t": time.time(), "worker": a.worker_id, "rank": rank,
            "ranks": size, "steps": step, "loss": ema, "params_checksum": sums[rank],
            "checksums": sums}
    if rank == 0:
        done.update({k: v for k, v in island.learner.stats.items()
                     if isinstance(v, (int, float, str))})
    write(done)
    dist.destroy_process_group()
    if len(set(sums)) != 1:
        sys.exit(f"rank {rank}: the ranks' parameters differ after the drain: {sums}")


if __name__ == "__main__":
    main()
