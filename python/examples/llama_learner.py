#!/usr/bin/env python3
"""The Llama-style model of llama.py trained as one learner of a DiLoCo fleet (diloco_ps).

The shards serve the model's Hugging Face folder (`diloco-server --model=hf:DIR`, the folder
llama.py writes); this learner builds the same module from DIR/config.json, loads
DIR/model.safetensors into it (so whichever learner joins first uploads the folder's weights as
theta(0)), and hands diloco_ps.Learner its named_parameters(): LlamaForCausalLM's order, which
is the folder's data order and so the shards' manifest. AdamW (betas 0.9/0.95, weight decay 0.1
on matrices, gradient clip 1.0) on this worker's share of the built-in synthetic data
(`diloco-ctl gen-data`, --ctl) or on an llm.c .bin file. The model trains where --device says
(cpu, or cuda with TF32 matrix products) in the --dtype given (float32, or bfloat16: the
learner keeps the fp32 master on the host, docs/pytorch.md).

  PYTHONPATH=build/dev/python /usr/bin/python3 python/examples/llama_learner.py \\
      --servers=tcp://127.0.0.1:5555,tcp://127.0.0.1:5556 --worker_id=0 --num_workers=2 \\
      --model_dir=/tmp/llama --steps=200 --ctl=build/dev/ctl/diloco-ctl

--steps=0 trains nothing: the learner joins, so its module holds the fleet's global model
exactly (a join pulls every fragment whole, in fp32), and leaves. With --eval=FILE.bin the
held-out loss of the module after the run (after --steps=0: the global model's) on the file's
first --eval_windows windows of the context is printed; --save=FILE.safetensors writes the
module's tensors. The last line is JSON: the learner's stats, the loss, the parameters'
checksum (diloco_ps.checksum over named_parameters() in order: the C++ worker's params_checksum)
and step_s, the mean seconds per step after the first --warmup steps. --no_learner runs the
same loop without the learner (nothing joins or pushes): the peer that the learner's
utilization (step_s without / step_s with) is measured against. On CUDA the JSON also splits
the timed steps by the GPU's clock (an event recorded at each step's start, read at the end,
so no step waits for it): due_ms and other_ms, the mean from one step's start to the next for
steps whose after_step copied a fragment and for the others; a learner whose cost lies in its
copies and waits shows it in due_ms only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

import diloco_ps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama  # noqa: E402


def checksum(model):
    return diloco_ps.checksum(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--worker_id", type=int, required=True)
    ap.add_argument("--num_workers", type=int, default=0, help="data shares (0: worker_id + 1)")
    ap.add_argument("--model_dir", required=True, help="the Hugging Face folder the shards serve")
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--codec", default="int8:256")
    ap.add_argument("--inner_steps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data", default="synthetic", help="synthetic or an llm.c .bin file")
    ap.add_argument("--ctl", default="diloco-ctl", help="diloco-ctl, for --data=synthetic")
    ap.add_argument("--eval", default="", help="a held-out .bin file to score the model on")
    ap.add_argument("--eval_windows", type=int, default=16)
    ap.add_argument("--save", default="", help="write the module's tensors here at the end")
    ap.add_argument("--progress", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--go_file", default="", help="after the join, wait for this file to exist")
    ap.add_argument("--lockstep", action="store_true",
                    help="wait at each push for its round's answer (synchronous DiLoCo)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--no_learner", action="store_true",
                    help="the same loop without the learner (the utilization peer)")
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of step_s")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as the C++ CUDA trainer's cuBLAS calls

    model = llama.load_hf_folder(a.model_dir).to(device, getattr(torch, a.dtype))
    T, V = model.config["max_position_embeddings"], model.config["vocab_size"]
    tokens = None
    if a.steps > 0:
        path = a.data
        if a.data == "synthetic":
            fd, path = tempfile.mkstemp(suffix=".bin")
            os.close(fd)
            n = a.num_workers or a.worker_id + 1
            subprocess.run([a.ctl, "gen-data", f"--out={path}", f"--worker={a.worker_id % n}",
                            f"--workers={n}", "--tokens=500000"], check=True,
                           stdout=subprocess.DEVNULL)
        tokens = llama.read_bin(path)
        if a.data == "synthetic":
            os.unlink(path)
        if int(tokens.max()) >= V:
            sys.exit(f"{a.data}: token {int(tokens.max())} is outside the vocabulary of {V}")

    learner = None if a.no_learner else diloco_ps.Learner(
        servers=a.servers, worker_id=a.worker_id, params=model.named_parameters(),
        codec=a.codec, inner_steps=a.inner_steps, fragments=a.fragments, lockstep=a.lockstep)
    decayed = [p for p in model.parameters() if p.dim() == 2]
    others = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": others, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if learner:
        learner.join()
    joined_checksum = checksum(model)
    print(f"learner {a.worker_id} joined: parameters checksum {joined_checksum}", flush=True)
    llama.wait_for_go(a.go_file)
    gen = torch.Generator().manual_seed(a.seed * 31 + a.worker_id + 1)
    # The loss's running mean stays on the device (no synchronisation per step; printed at
    # --progress), so the loop is what a GPU training loop would be.
    start, ema, timed = time.time(), None, None
    marks = []  # CUDA: (start event, whether after_step copied) per timed step
    copies = 0  # fragments copied down and up so far (CUDA, with the learner)
    if learner and device.type == "cuda":
        copies = learner.stats["fetched_fragments"] + learner.stats["stored_fragments"]
    for step in range(1, a.steps + 1):
        if step == a.warmup + 1:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            timed = time.perf_counter()
        if timed is not None and device.type == "cuda":
            marks.append([torch.cuda.Event(enable_timing=True), False])
            marks[-1][0].record()
        starts = torch.randint(0, len(tokens) - T - 1, (a.batch,), generator=gen)
        window = torch.stack([tokens[s:s + T + 1] for s in starts.tolist()]).to(device)
        loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if learner:
            learner.after_step(tokens=a.batch * T)
            if device.type == "cuda":
                st = learner.stats
                now = st["fetched_fragments"] + st["stored_fragments"]
                if marks:
                    marks[-1][1] = now != copies
                copies = now
        loss = loss.detach().float()
        ema = loss if ema is None else 0.9 * ema + 0.1 * loss
        if step % a.progress == 0:
            st = learner.stats if learner else {"pushes": 0, "applied": 0, "adoptions": 0}
            print(f"learner {a.worker_id} step {step} loss {ema.item():.4f} pushes "
                  f"{st['pushes']} applied {st['applied']} adopted {st['adoptions']} "
                  f"({time.time() - start:.1f}s)", flush=True)
    step_s = None
    if timed is not None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_s = (time.perf_counter() - timed) / (a.steps - a.warmup)
    split = {}
    if len(marks) > 1:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        ms = [(m[0].elapsed_time(n[0]), m[1]) for m, n in zip(marks, marks[1:] + [[end]])]
        for key, due in (("due_ms", True), ("other_ms", False)):
            xs = [t for t, d in ms if d == due]
            split[key] = sum(xs) / len(xs) if xs else None
            split[key.replace("_ms", "_steps")] = len(xs)
    if a.steps > 0 and learner:
        learner.drain()
    done = {"event": "done", "worker": a.worker_id, "joined_checksum": joined_checksum,
            "checksum": checksum(model), "train_loss": None if ema is None else ema.item(),
            "step_s": step_s, **split, "device": str(device), "dtype": a.dtype,
            **(learner.stats if learner else {})}
    if a.eval:
        tokens = llama.read_bin(a.eval)
        done["heldout_loss"] = llama.heldout_loss(model, tokens, a.eval_windows, T)
    if a.save:
        llama.write_safetensors(a.save, list(model.named_parameters()), {"format": "pt"})
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
