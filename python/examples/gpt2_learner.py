#!/usr/bin/env python3
"""A PyTorch GPT-2 trained as one learner of a DiLoCo fleet (diloco_ps), beside C++ workers.

The model is the C++ worker's (pre-LN GPT-2, tanh GELU, tied head, GPT-2 initialisation) with
its parameter names, shapes and order (GPT2Model's names, nn.Linear [out, in]), so the shards
see the same manifest from both kinds of learner. AdamW with the C++ worker's settings
(betas 0.9/0.95, weight decay 0.1 on matrices and embeddings only, gradient clip 1.0).

Data: an llm.c .bin token file (--data=FILE.bin), or --data=synthetic: this worker's share of
the built-in Markov mixture, written by `diloco-ctl gen-data` (--ctl) into a temporary file.

  PYTHONPATH=build/dev/python /usr/bin/python3 python/examples/gpt2_learner.py \\
      --servers=tcp://127.0.0.1:5555,tcp://127.0.0.1:5556 --worker_id=3 --model=tiny \\
      --steps=600 --data=synthetic --ctl=build/dev/ctl/diloco-ctl

Prints one progress line every --progress steps and, at the end, a JSON line with the learner's
stats and the parameters' checksum after the join (the C++ worker's params_checksum).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import diloco_ps

PRESETS = {"tiny": (2, 4, 64, 256, 64), "small": (4, 4, 128, 256, 128)}  # L, H, C, V, T


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn, self.c_proj, self.H = nn.Linear(C, 3 * C), nn.Linear(C, C), H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C), Attention(C, H)
        self.ln_2, self.mlp = nn.LayerNorm(C), Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2 initialisation
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def read_bin(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"{path}: not an llm.c token file")
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.int16).to(torch.int64) & 0xFFFF
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--worker_id", type=int, required=True)
    ap.add_argument("--num_workers", type=int, default=0, help="data shares (0: worker_id + 1)")
    ap.add_argument("--model", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--codec", default="int8:256")
    ap.add_argument("--inner_steps", type=int, default=50)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data", default="synthetic", help="synthetic or an llm.c .bin file")
    ap.add_argument("--ctl", default="diloco-ctl", help="diloco-ctl, for --data=synthetic")
    ap.add_argument("--progress", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    L, H, C, V, T = PRESETS[a.model]

    path = a.data
    if a.data == "synthetic":
        fd, path = tempfile.mkstemp(suffix=".bin")
        os.close(fd)
        n = a.num_workers or a.worker_id + 1
        subprocess.run([a.ctl, "gen-data", f"--out={path}", f"--worker={a.worker_id % n}",
                        f"--workers={n}", "--tokens=2000000"], check=True,
                       stdout=subprocess.DEVNULL)
    tokens = read_bin(path)
    if a.data == "synthetic":
        os.unlink(path)
    if int(tokens.max()) >= V:
        sys.exit(f"{a.data}: token {int(tokens.max())} is outside the vocabulary of {V}")

    model = GPT(L, H, C, V, T)
    learner = diloco_ps.Learner(servers=a.servers, worker_id=a.worker_id,
                                params=model.named_parameters(), codec=a.codec,
                                inner_steps=a.inner_steps, fragments=a.fragments)
    decayed = [p for _, p in model.named_parameters() if p.dim() == 2]
    others = [p for _, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": others, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    learner.join()
    # The model's own parameters (not the learner's buffer): the join wrote into them.
    joined_checksum = diloco_ps.checksum(torch.cat([p.reshape(-1) for p in model.parameters()]))
    print(f"learner {a.worker_id} joined: plan {learner.plan_fingerprint:x}, parameters "
          f"checksum {joined_checksum}", flush=True)
    gen = torch.Generator().manual_seed(a.seed * 31 + a.worker_id + 1)
    start, ema = time.time(), None
    for step in range(1, a.steps + 1):
        starts = torch.randint(0, len(tokens) - T - 1, (a.batch,), generator=gen)
        window = torch.stack([tokens[s:s + T + 1] for s in starts.tolist()])
        loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        learner.after_step(tokens=a.batch * T)
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if step % a.progress == 0:
            st = learner.stats
            print(f"learner {a.worker_id} step {step} loss {ema:.4f} pushes {st['pushes']} "
                  f"applied {st['applied']} adopted {st['adoptions']} "
                  f"({time.time() - start:.1f}s)", flush=True)
    learner.drain()
    for kind, fragment, detail in learner.take_events():
        if kind == "refused":
            print(f"learner {a.worker_id}: fragment {fragment} refused: {detail}", flush=True)
    print(json.dumps({"event": "done", "worker": a.worker_id, "joined_checksum": joined_checksum,
                      "loss": ema, **{k: v for k, v in learner.stats.items()}}), flush=True)


if __name__ == "__main__":
    main()
