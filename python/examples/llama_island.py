#!/usr/bin/env python3
"""The Llama-style model of llama.py trained by an island of several ranks: ONE learner of a
DiLoCo fleet (diloco_ps.Island), its ranks under DistributedDataParallel.

Starts --ranks processes on this host (torch.multiprocessing; gloo on the CPU, or NCCL with
--device=cuda, one GPU per rank; --backend=gloo with --device=cuda lets ranks share GPUs),
each a DDP replica of the module built from DIR/config.json and DIR/model.safetensors (the
folder the shards serve as --model=hf:DIR). Rank 0's learner is the only one that talks to the
shards; after every step what it adopted is broadcast to the other ranks
(python/diloco_ps/island.py). The island's data is the worker's share of the built-in
synthetic data (`diloco-ctl gen-data --worker=W --workers=N`), each rank sampling its batches
from it with its own generator. The last line is rank 0's JSON: the
learner's stats and each rank's parameter checksum after the join and after the drain (those
after the drain must all be equal, else this exits 1).

  PYTHONPATH=build/dev/python /usr/bin/python3 python/examples/llama_island.py \\
      --servers=tcp://127.0.0.1:5550,tcp://127.0.0.1:5551 --worker_id=0 --num_workers=2 \\
      --ranks=2 --model_dir=/tmp/llama --steps=200 --ctl=build/dev/ctl/diloco-ctl
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import diloco_ps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama  # noqa: E402


def tokens_of(a):
    fd, path = tempfile.mkstemp(suffix=".bin")
    os.close(fd)
    n = a.num_workers or a.worker_id + 1
    subprocess.run([a.ctl, "gen-data", f"--out={path}", f"--worker={a.worker_id % n}",
                    f"--workers={n}", "--tokens=500000"], check=True, stdout=subprocess.DEVNULL)
    tokens = llama.read_bin(path)
    os.unlink(path)
    return tokens


def rank_main(rank, a, init, tokens):
    cuda = a.device == "cuda"
    # One GPU per rank; with fewer GPUs than ranks (gloo only: NCCL refuses two ranks on one
    # GPU) the ranks share them round robin.
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(a.threads)
    backend = a.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=a.ranks,
                            timeout=datetime.timedelta(seconds=300))
    model = llama.load_hf_folder(a.model_dir).to(device)
    T = model.config["max_position_embeddings"]
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    island = diloco_ps.Island(servers=a.servers, worker_id=a.worker_id, params=ddp,
                              codec=a.codec, inner_steps=a.inner_steps, fragments=a.fragments,
                              lockstep=a.lockstep)
    decayed = [p for p in model.parameters() if p.dim() == 2]
    others = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": others, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    island.join()
    joined = island.checksums()  # every rank's parameters after the join: theta(0), the same
    if rank == 0:
        print(f"island {a.worker_id} joined: parameters checksums {joined}", flush=True)
    llama.wait_for_go(a.go_file)
    gen = torch.Generator().manual_seed(a.seed * 31 + a.worker_id * 1000 + rank + 1)
    start, ema = time.time(), None
    for step in range(1, a.steps + 1):
        starts = torch.randint(0, len(tokens) - T - 1, (a.batch,), generator=gen)
        window = torch.stack([tokens[s:s + T + 1] for s in starts.tolist()]).to(device)
        loss = ddp(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        island.after_step(tokens=a.batch * T * a.ranks)  # the island's tokens for the step
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if rank == 0 and step % a.progress == 0:
            st = island.learner.stats
            print(f"island {a.worker_id} step {step} loss {ema:.4f} pushes {st['pushes']} "
                  f"applied {st['applied']} adopted {st['adoptions']} "
                  f"({time.time() - start:.1f}s)", flush=True)
    island.drain()
    sums = island.checksums()
    if rank == 0:
        done = {"event": "done", "worker": a.worker_id, "ranks": a.ranks, "checksums": sums,
                "joined_checksums": joined, "train_loss": ema, **island.learner.stats}
        print(json.dumps(done), flush=True)
    dist.destroy_process_group()
    if len(set(sums)) != 1:
        sys.exit(f"rank {rank}: the ranks' parameters differ after the drain: {sums}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--worker_id", type=int, required=True)
    ap.add_argument("--num_workers", type=int, default=0, help="data shares (0: worker_id + 1)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--backend", choices=["", "nccl", "gloo"], default="",
                    help="torch.distributed's backend ('': NCCL on CUDA, gloo on the CPU); gloo "
                    "with --device=cuda lets ranks share a GPU")
    ap.add_argument("--model_dir", required=True, help="the Hugging Face folder the shards serve")
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--codec", default="int8:256")
    ap.add_argument("--inner_steps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ctl", default="diloco-ctl", help="diloco-ctl, for the synthetic data")
    ap.add_argument("--progress", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--go_file", default="", help="after the join, wait for this file to exist")
    ap.add_argument("--lockstep", action="store_true",
                    help="wait at each push for its round's answer (synchronous DiLoCo)")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(rank_main, args=(a, init, tokens_of(a)), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
