#!/usr/bin/env python3
"""A Llama-style decoder in plain PyTorch, and its Hugging Face folder, for any-model fleets.

The architecture of transformers' LlamaForCausalLM, written out here (no transformers needed):
RMSNorm before attention and MLP and at the end, rotary position embeddings (rotate-half, as
transformers applies them), grouped-query attention (n_kv_heads key/value heads shared by
n_heads query heads), a SwiGLU MLP (down(silu(gate(x)) * up(x))), no biases, an untied LM head.
Parameter names, shapes ([out, in], as nn.Linear) and order are LlamaForCausalLM's, so the
folder this writes (config.json with LlamaConfig's fields, model.safetensors) is a Hugging Face
Llama folder, and the shards serve it as `--model=hf:DIR` with the manifest this module's
named_parameters() gives.

Small by default: 2 layers, width 64, 4 heads, 2 key/value heads, MLP 172, vocabulary 256 (the
built-in synthetic data of `diloco-ctl gen-data`), context 64.

Safetensors without the safetensors package (python3-safetensors is not in Debian 12): the
header is written and read here (write_safetensors, read_safetensors: F32, F16, BF16, F64).

  /usr/bin/python3 python/examples/llama.py --out=/tmp/llama [--seed=1] [--layers=2 ...]
      writes /tmp/llama/config.json and /tmp/llama/model.safetensors (F32, freshly initialised)
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULTS = dict(vocab_size=256, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-5, rope_theta=10000.0)


def hf_config(**overrides):
    """config.json's fields for LlamaForCausalLM (LlamaConfig) of this size."""
    c = dict(DEFAULTS, **overrides)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **c,
            "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
            "tie_word_embeddings": False, "initializer_range": 0.02, "torch_dtype": "float32"}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope(T, head_dim, theta):
    """cos and sin, [T, head_dim], as transformers' LlamaRotaryEmbedding (default rope type)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.H, self.KV, self.hd = H, KV, D // H
        self.q_proj = nn.Linear(D, H * self.hd, bias=False)
        self.k_proj = nn.Linear(D, KV * self.hd, bias=False)
        self.v_proj = nn.Linear(D, KV * self.hd, bias=False)
        self.o_proj = nn.Linear(H * self.hd, D, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.H // self.KV  # each key/value head serves `rep` query heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.hd))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = Attention(c), Mlp(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):  # LlamaModel: the names under "model."
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """LlamaForCausalLM's parameters and forward pass. forward(idx, targets) is the mean
    cross-entropy (nats per token) of predicting targets from idx, both [B, T]."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        self.model = Body(self.config)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)
        std = config.get("initializer_range", 0.02)
        for _, p in self.named_parameters():  # transformers' Llama initialisation
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        c = self.config
        cos, sin = rope(idx.shape[1], c["hidden_size"] // c["num_attention_heads"],
                        c["rope_theta"])
        x = self.model.embed_tokens(idx)
        cos, sin = cos.to(x.device, x.dtype), sin.to(x.device, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.model.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def read_bin(path):
    """The tokens of an llm.c .bin file (header of 256 int32, magic 20240520, then uint16s)."""
    with open(path, "rb") as f:
        header = torch.frombuffer(bytearray(f.read(1024)), dtype=torch.int32)
        if int(header[0]) != 20240520 or int(header[1]) != 1:
            raise ValueError(f"{path}: not an llm.c token file")
        return torch.frombuffer(bytearray(f.read()), dtype=torch.int16).to(torch.int64) & 0xFFFF


def wait_for_go(path, timeout=300):
    """Waits until `path` exists (a test starts a fleet's learners together once all joined)."""
    end = time.time() + timeout
    while path and not os.path.exists(path):
        if time.time() > end:
            raise TimeoutError(f"{path} did not appear in {timeout} s")
        time.sleep(0.02)


def heldout_loss(model, tokens, windows, T):
    """Mean loss over the first `windows` consecutive windows of T + 1 tokens (fixed: the same
    tokens for every caller), in one batch."""
    if len(tokens) < windows * (T + 1):
        raise ValueError(f"held-out file: {len(tokens)} tokens, {windows * (T + 1)} needed")
    w = tokens[:windows * (T + 1)].view(windows, T + 1).to(next(model.parameters()).device)
    with torch.no_grad():
        return model(w[:, :-1], w[:, 1:]).item()


# Safetensors, by hand: u64 header length, JSON header, raw little-endian data.
_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.float64: "F64"}
_TORCH = {v: k for k, v in _DTYPES.items()}


def write_safetensors(path, named, metadata=None):
    """Writes (name, tensor) pairs in the order given (their data order), each in its dtype."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in named:
        t = t.detach().contiguous().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def read_safetensors(path):
    """{name: tensor} in data order (F32, F16, BF16, F64), and the metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=_TORCH[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, meta


def save_hf_folder(model, out, dtype=torch.float32):
    """config.json and model.safetensors (named_parameters() order) of `model` into `out`."""
    os.makedirs(out, exist_ok=True)
    config = hf_config(**{k: model.config[k] for k in DEFAULTS})
    config["torch_dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16",
                             torch.float16: "float16"}[dtype]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out, "model.safetensors"),
                      [(n, p.to(dtype)) for n, p in model.named_parameters()],
                      {"format": "pt"})


def load_hf_folder(folder, weights=True):
    """The model of a folder: config.json's sizes, and with `weights` model.safetensors loaded
    strictly (every parameter, nothing else; values widened to float32)."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model = Llama({k: config[k] for k in DEFAULTS if k in config} |
                  {"initializer_range": config.get("initializer_range", 0.02)})
    if weights:
        tensors, _ = read_safetensors(os.path.join(folder, "model.safetensors"))
        model.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=True)
    return model


def write_manifest(model, path, source=""):
    """The manifest JSON (docs/pytorch.md) of the model's named_parameters(), for
    --model=manifest:PATH."""
    tensors = [{"name": n, "shape": list(p.shape)} for n, p in model.named_parameters()]
    doc = {"format": "diloco-manifest", "version": 1, "tensors": tensors}
    if source:
        doc["source"] = source
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description="writes a freshly initialised Llama-style model "
                                 "as a Hugging Face folder")
    ap.add_argument("--out", required=True, help="the folder to write")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--manifest", default="", help="also write the manifest JSON here")
    for k, v in DEFAULTS.items():
        ap.add_argument(f"--{k}", type=type(v), default=v)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = Llama({k: getattr(a, k) for k in DEFAULTS})
    save_hf_folder(model, a.out, getattr(torch, a.dtype))
    if a.manifest:
        write_manifest(model, a.manifest)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: {len(list(model.parameters()))} tensors, {n} parameters, {a.dtype}")


if __name__ == "__main__":
    main()
