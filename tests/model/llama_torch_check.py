#!/usr/bin/env python3
"""The C++ Llama (worker/model/llama/) against PyTorch on the same weights: the reference is
python/examples/llama.py, transformers' LlamaForCausalLM written out in plain PyTorch.

DIR holds what llama_torch_test.cc wrote: the Hugging Face folder of the weights (config.json,
model.safetensors: the C++ export, which llama.py's load_hf_folder loads strictly: the same
names, shapes and nothing else), tokens.json (B, T, inputs, targets, the C++ loss) and
grads.safetensors (the C++ gradients, fp32). The module runs in float64; the loss must agree
within 1e-9 (relative) and every gradient tensor within 1e-5 of its largest value.

  /usr/bin/python3 llama_torch_check.py DIR
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import json
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "examples"))
import llama  # noqa: E402


def main():
    d = sys.argv[1]
    model = llama.load_hf_folder(d).double()
    with open(os.path.join(d, "tokens.json")) as f:
        t = json.load(f)
    B, T = t["B"], t["T"]
    idx = torch.tensor(t["inputs"], dtype=torch.long).view(B, T)
    tgt = torch.tensor(t["targets"], dtype=torch.long).view(B, T)
    loss = model(idx, tgt)
    loss.backward()
    ok = True
    rel = abs(loss.item() - t["loss"]) / abs(loss.item())
    print(f"loss torch {loss.item():.12f} C++ {t['loss']:.12f} relative error {rel:.3g}")
    if rel > 1e-9:
        ok = False
    grads, _ = llama.read_safetensors(os.path.join(d, "grads.safetensors"))
    named = dict(model.named_parameters())
    if sorted(grads) != sorted(named):
        print("FAIL: gradient names differ:", sorted(set(grads) ^ set(named)))
        return 1
    worst = 0.0
    for name, p in named.items():
        ref = p.grad
        err = (grads[name].double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        worst = max(worst, err)
        if err > 1e-5:
            print(f"FAIL: {name}: gradient error {err:.3g} of its largest value")
            ok = False
    print(f"{len(named)} gradient tensors, worst error {worst:.3g} of the tensor's largest value")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
