#!/usr/bin/env python3
"""One learner of learner_dtypes_test.py: a small model trained in --dtype (float32, bfloat16 or
float16) as a lockstep learner of a fleet, on a stream of batches that depends only on --seed
(the same for every learner given the same seed), labels drawn from a fixed random teacher.
--model=mlp: an MLP classifier trained with AdamW. --model=bigram: a table of next-token logits
(one nn.Embedding, V x V) trained with SGD: torch 1.13 on the CPU has no float16 matrix product
(addmm) nor float16 AdamW (addcmul), but it has float16 embedding lookups, their backward and
SGD's update, so this model trains in float16 end to end.

Prints "joined" once joined, trains once --go_file exists (so that no learner trains before
every learner has joined), and prints at the end one JSON line: the held-out loss of the parameters
after the join (theta(0)) and at the end, both computed in fp32 from the parameters upcast
(the same evaluation for every dtype), the last training loss, and the learner's stats.
"""
import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

IN, HIDDEN, CLASSES = 32, 128, 10
VOCAB = 64  # the bigram model's


def make_model(kind):
    if kind == "bigram":
        return torch.nn.Embedding(VOCAB, VOCAB)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.GELU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU(),
                               torch.nn.Linear(HIDDEN, CLASSES))


def bigram_batch(gen, n):
    g = torch.Generator().manual_seed(0)  # the task: the same teacher everywhere
    logits = torch.randn(VOCAB, VOCAB, generator=g) * 2
    x = torch.randint(0, VOCAB, (n,), generator=gen)
    return x, torch.multinomial(torch.softmax(logits[x], dim=-1), 1, generator=gen).squeeze(1)


def teacher_batch(gen, n):
    g = torch.Generator().manual_seed(0)  # the task: the same teacher everywhere
    w1, w2 = torch.randn(IN, 64, generator=g), torch.randn(64, CLASSES, generator=g)
    x = torch.randn(n, IN, generator=gen)
    probs = torch.softmax(torch.tanh(x @ w1) @ w2 * 0.5, dim=-1)
    return x, torch.multinomial(probs, 1, generator=gen).squeeze(1)


def held_out_loss(model, x, y):
    m = copy.deepcopy(model).float()
    with torch.no_grad():
        return F.cross_entropy(m(x), y).item()


def inputs(x, kind, dtype):
    return x if kind == "bigram" else x.to(dtype)  # token ids stay integers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python_dir", required=True)
    ap.add_argument("--servers", required=True)
    ap.add_argument("--worker_id", type=int, required=True)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], required=True)
    ap.add_argument("--model", choices=["mlp", "bigram"], default="mlp")
    ap.add_argument("--steps", type=int, default=125)
    ap.add_argument("--inner_steps", type=int, default=10)
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=None, help="default 3e-3 (mlp), 10 (bigram)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--go_file", default="", help="train once this file exists")
    a = ap.parse_args()
    sys.path.insert(0, a.python_dir)
    import diloco_ps

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    dtype = getattr(torch, a.dtype)
    model = make_model(a.model).to(dtype)
    batch = bigram_batch if a.model == "bigram" else teacher_batch
    learner = diloco_ps.Learner(servers=a.servers, worker_id=a.worker_id,
                                params=model.named_parameters(), fragments=a.fragments,
                                inner_steps=a.inner_steps, lockstep=True, stream=False)
    if a.model == "bigram":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr or 10.0)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr or 3e-3)
    learner.join(timeout=60)
    print("joined", flush=True)
    x_eval, y_eval = batch(torch.Generator().manual_seed(999), 4096)
    start = held_out_loss(model, x_eval, y_eval)
    end = time.time() + 120
    while a.go_file and not os.path.exists(a.go_file):
        if time.time() > end:
            sys.exit(f"{a.go_file} did not appear")
        time.sleep(0.01)
    t0 = time.time()
    gen = torch.Generator().manual_seed(a.seed)
    for _ in range(a.steps):
        x, y = batch(gen, a.batch)
        loss = F.cross_entropy(model(inputs(x, a.model, dtype)).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        learner.after_step(tokens=a.batch)
    learner.drain(timeout=30)
    print(json.dumps({"dtype": a.dtype, "seconds": time.time() - t0, "start_loss": start,
                      "train_loss": loss.item(),
                      "final_loss": held_out_loss(model, x_eval, y_eval),
                      **{k: v for k, v in learner.stats.items() if k != "versions"}}),
          flush=True)


if __name__ == "__main__":
    main()
