#!/usr/bin/env python3
"""The same GPT-2 training step in PyTorch eager, for comparison with model_gpu_bench and
model_cpu_bench.

Same model (pre-LN GPT-2, tanh GELU, tied LM head, explicit causal softmax attention) and
optimizer (AdamW, clip 1.0). On the GPU (default): GPT-2 124M and 350M, batch 8 x 1024, fp32
parameters with TF32 matmuls. With --device cpu: one preset of common/model_spec.cc (tiny,
small) at batch 8 x context, fp32, --threads intra-op threads (run it with
OMP_WAIT_POLICY=PASSIVE: spinning OpenMP workers starve a 2-core box; cpu_vs_torch.py does).
Prints "RESULT name tokens_per_s tflops" lines like the C++ benchmarks (names end in -sdpa
with --sdpa) and the TF32 setting in effect; exits 1 on the GPU path when there is no GPU.
  python3 torch_gpt2.py [--batch 8] [--steps 10] [--sdpa]
  python3 torch_gpt2.py --device cpu --model small --threads 1 [--steps 20]
"""
import argparse
import contextlib
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (L, H, C, vocab, context)
CONFIGS = {"gpt2-124m": (12, 12, 768, 50257, 1024), "gpt2-350m": (24, 16, 1024, 50257, 1024)}
CPU_CONFIGS = {"tiny": (2, 4, 64, 256, 64), "small": (4, 4, 128, 256, 128)}


class Block(nn.Module):
    def __init__(self, C, H, sdpa):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.H, self.sdpa = H, sdpa

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T, sdpa):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, sdpa) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 init as InitGpt2 (worker/model/param_layout.cc): matrices and embeddings
        # N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1. Speed
        # does not depend on it, but PyTorch's default N(0, 1) embeddings (tied to the head) start
        # the loss near 100 where model_gpu_bench starts at ln(50257) = 10.8 on random tokens.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith(("c_proj.weight", "mlp_proj.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def measure(name, cfg, batch, steps, sdpa, dev):
    """Times `steps` training steps after 3 warm-up ones and prints the RESULT line."""
    L, H, C, V, T = cfg
    # Initialise on the GPU: seconds less of CPU init at 350M (torch.device is a context
    # manager from PyTorch 2.0; Debian 12's 1.13 runs the CPU path only).
    with torch.device(dev) if dev == "cuda" else contextlib.nullcontext():
        model = GPT(L, H, C, V, T, sdpa)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, V, (batch, T), device=dev)
    tgt = torch.randint(0, V, (batch, T), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(3):
        step()
    sync()
    t0 = time.time()
    for _ in range(steps):
        loss = step()
    sync()
    sec = time.time() - t0
    P = sum(p.numel() for p in model.parameters())
    tokens = batch * T * steps
    flops = tokens * (6.0 * P + 12.0 * L * T * C)
    if sdpa:
        name += "-sdpa"
    print(f"{name} batch {batch} x {T}: {tokens / sec:.0f} tokens/s, "
          f"{flops / sec / 1e12:.4f} TFLOP/s, {1e3 * sec / steps:.1f} ms/step, "
          f"loss {loss.item():.3f}")
    print(f"RESULT {name} {tokens / sec:.1f} {flops / sec / 1e12:.5f}")
    del model, opt


def use_tf32():
    """TF32 matmuls (fp32 storage), as model_gpu_bench's cuBLAS: PyTorch 2.9+ takes
    fp32_precision, older ones the allow_tf32 flags. Returns the setting in effect."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32"
        return f"torch.backends.cuda.matmul.fp32_precision = {matmul.fp32_precision!r}"
    matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return f"torch.backends.cuda.matmul.allow_tf32 = {matmul.allow_tf32}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--sdpa", action="store_true", help="fused attention instead of explicit")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--model", choices=sorted(CPU_CONFIGS), default="small", help="--device cpu")
    ap.add_argument("--threads", type=int, default=1, help="--device cpu: intra-op threads")
    args = ap.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
        measure(args.model, CPU_CONFIGS[args.model], args.batch, args.steps, args.sdpa, "cpu")
        return
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing measured")
        sys.exit(1)
    print(f"precision: {use_tf32()}")
    for name, cfg in CONFIGS.items():
        measure(name, cfg, args.batch, args.steps, args.sdpa, "cuda")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
