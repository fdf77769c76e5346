#!/usr/bin/env python3
"""Loads a `diloco-ctl export --format=hf` directory the way Hugging Face transformers' GPT-2
does, and prints its loss on an llm.c .bin token file.

transformers is not packaged for Debian 12, so this follows its GPT-2 rules itself, strictly:
config.json's GPT2Config fields size the model; model.safetensors must carry the metadata
format "pt" and exactly GPT2LMHeadModel's state-dict keys ("transformer." + GPT2Model's names,
lm_head.weight absent when tie_word_embeddings) with its shapes, the attention and MLP matrices
in Conv1D's [in, out] orientation (y = x @ W + b); anything missing, unexpected or misshaped
is an error. The forward pass is GPT-2's (pre-LN blocks, causal attention scaled by
1/sqrt(head size), gelu_new, final LayerNorm, tied head).

The loss is over the file's tokens read as consecutive non-overlapping windows of n_positions
targets (the last one shorter), as `diloco-ctl eval --data=FILE.bin` reads them, and printed as
"loss <nats/token> over <n> tokens".
  /usr/bin/python3 hf_gpt2_loader.py DIR FILE.bin
Exit status 0 on success, 1 on a layout error, 77 when torch is missing (a test skips).
"""
import json
import math
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not installed for", sys.executable)
    sys.exit(77)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {info['dtype']}, expected F32")
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32)
        tensors[name] = t.reshape(info["shape"]) if info["shape"] else t
    return tensors, meta


def expected_shapes(cfg):
    C, L, V, T = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    inner = cfg.get("n_inner") or 4 * C
    s = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [T, C],
         "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for i in range(L):
        p = f"transformer.h.{i}."
        s.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                  p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                  p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                  p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                  p + "mlp.c_fc.weight": [C, inner], p + "mlp.c_fc.bias": [inner],
                  p + "mlp.c_proj.weight": [inner, C], p + "mlp.c_proj.bias": [C]})
    if not cfg.get("tie_word_embeddings", True):
        s["lm_head.weight"] = [V, C]
    return s


def load(directory):
    with open(f"{directory}/config.json") as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "gpt2" or "GPT2LMHeadModel" not in cfg.get("architectures", []):
        raise ValueError("config.json is not a GPT2LMHeadModel config")
    if cfg.get("activation_function") != "gelu_new":
        raise ValueError(f"activation {cfg.get('activation_function')}: this loader is gelu_new")
    sd, meta = read_safetensors(f"{directory}/model.safetensors")
    if meta.get("format") != "pt":
        raise ValueError("model.safetensors lacks metadata format=pt (transformers refuses it)")
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(sd))
    unexpected = sorted(set(sd) - set(want))
    if missing or unexpected:
        raise ValueError(f"missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    for k, shape in want.items():
        if list(sd[k].shape) != shape:
            raise ValueError(f"{k}: shape {list(sd[k].shape)}, GPT-2 wants {shape}")
    if "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied
    return cfg, sd


def forward(cfg, sd, idx):
    B, T = idx.shape
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    w = lambda k: sd["transformer." + k]
    x = w("wte.weight")[idx] + w("wpe.weight")[:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = F.layer_norm(x, (C,), w(p + "ln_1.weight"), w(p + "ln_1.bias"), eps)
        q, k, v = (a @ w(p + "attn.c_attn.weight") + w(p + "attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w(p + "attn.c_proj.weight") + w(p + "attn.c_proj.bias")
        m = F.layer_norm(x, (C,), w(p + "ln_2.weight"), w(p + "ln_2.bias"), eps)
        m = F.gelu(m @ w(p + "mlp.c_fc.weight") + w(p + "mlp.c_fc.bias"), approximate="tanh")
        x = x + m @ w(p + "mlp.c_proj.weight") + w(p + "mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), w("ln_f.weight"), w("ln_f.bias"), eps)
    return x @ sd["lm_head.weight"].t()


def read_bin(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            raise ValueError(f"{path}: not an llm.c token file")
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.int16).to(torch.int64) & 0xFFFF
    if len(tokens) != header[2]:
        raise ValueError(f"{path}: {len(tokens)} tokens, the header says {header[2]}")
    return tokens


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    try:
        cfg, sd = load(sys.argv[1])
    except (ValueError, KeyError, OSError) as e:
        print(f"hf_gpt2_loader: {e}")
        return 1
    tokens = read_bin(sys.argv[2])
    T, n = cfg["n_positions"], len(tokens) - 1
    total = 0.0
    with torch.no_grad():
        for start in range(0, n, T):
            length = min(T, n - start)
            inp = tokens[start:start + length].unsqueeze(0)
            tgt = tokens[start + 1:start + 1 + length]
            logits = forward(cfg, sd, inp)[0].double()
            total += F.cross_entropy(logits, tgt, reduction="sum").item()
    print(f"loss {total / n:.6f} over {n} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
