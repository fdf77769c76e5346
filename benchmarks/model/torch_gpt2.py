#!/usr/bin/env python3
"""The same GPT-2 training step in PyTorch eager, for comparison with model_gpu_bench.

Same model (pre-LN GPT-2, tanh GELU, tied LM head, explicit causal softmax attention), batch
(8 x 1024), precision (fp32 parameters, TF32 matmuls) and optimizer (AdamW, clip 1.0).
Prints "RESULT name tokens_per_s tflops" lines like model_gpu_bench.
  python3 torch_gpt2.py [--batch 8] [--steps 10] [--sdpa]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {"gpt2-124m": (12, 12, 768), "gpt2-350m": (24, 16, 1024)}
VOCAB, CONTEXT = 50257, 1024


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
    def __init__(self, L, H, C, sdpa):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, C), nn.Embedding(CONTEXT, C)
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
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--sdpa", action="store_true", help="fused attention instead of explicit")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    for name, (L, H, C) in CONFIGS.items():
        with torch.device(dev):  # initialise on the GPU: seconds less of CPU init at 350M
            model = GPT(L, H, C, args.sdpa)
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        idx = torch.randint(0, VOCAB, (args.batch, CONTEXT), device=dev)
        tgt = torch.randint(0, VOCAB, (args.batch, CONTEXT), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(args.steps):
            loss = step()
        torch.cuda.synchronize()
        sec = time.time() - t0
        P = sum(p.numel() for p in model.parameters())
        tokens = args.batch * CONTEXT * args.steps
        flops = tokens * (6.0 * P + 12.0 * L * CONTEXT * C)
        print(f"{name} batch {args.batch} x {CONTEXT}: {tokens / sec:.0f} tokens/s, "
              f"{flops / sec / 1e12:.1f} TFLOP/s, {1e3 * sec / args.steps:.1f} ms/step, "
              f"loss {loss.item():.3f}")
        print(f"RESULT {name} {tokens / sec:.1f} {flops / sec / 1e12:.3f}")
        del model, opt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
