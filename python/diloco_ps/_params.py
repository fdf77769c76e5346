"""The parameters a learner syncs, checked once and described as the manifest the shards plan from.

A model is given as an nn.Module (its named_parameters()), a dict, or (name, tensor) pairs, in
the order the manifest lists them. Every check raises ValueError naming the tensor and the cause
before anything is allocated or changed, so a refused model is left as it was.
"""
import torch

# The dtypes a learner syncs, with their safetensors names (the manifest's informative "dtype").
# Every value travels and is held by the shards as fp32 whatever the dtype.
DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def named_tensors(params):
    """(name, tensor) pairs, in order, from a module, a dict or an iterable of pairs."""
    if isinstance(params, torch.nn.Module):
        params = params.named_parameters()
    elif isinstance(params, dict):
        params = params.items()
    named = []
    for item in params:
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or
                not isinstance(item[0], str) or not isinstance(item[1], torch.Tensor)):
            raise ValueError(f"expected (name, tensor) pairs, got {type(item).__name__}")
        named.append((item[0], item[1]))
    return named


def describe(named):
    """The manifest of (name, tensor) pairs: names, shapes and dtype names. Refuses an empty
    model, a name given twice, a dtype other than float32/bfloat16/float16, a tensor without
    elements or without dimensions (the manifest's rules, common/tensor_decl.h)."""
    if not named:
        raise ValueError("no parameters")
    seen = set()
    for name, p in named:
        if not name:
            raise ValueError("a parameter without a name")
        if name in seen:
            raise ValueError(f"parameter {name}: given twice (each name once, in manifest order)")
        seen.add(name)
        if p.dtype not in DTYPES:
            raise ValueError(f"parameter {name}: dtype {p.dtype}; the learner syncs float32, "
                             "bfloat16 or float16 parameters")
        if p.dim() == 0:
            raise ValueError(f"parameter {name}: a 0-dim tensor; a manifest tensor has at least "
                             "one dimension (make it shape [1])")
        if p.numel() == 0:
            raise ValueError(f"parameter {name}: empty (shape {list(p.shape)}); a manifest "
                             "tensor has elements")
    return ([name for name, _ in named], [list(p.shape) for _, p in named],
            [DTYPES[p.dtype] for _, p in named])


def check_copyable(named):
    """What the learner's copies need beyond the manifest: each tensor on the CPU or a CUDA
    device, contiguous (its flattened view is its storage), and no tensor given twice under two
    names (a tied weight is one parameter)."""
    where = {}
    for name, p in named:
        if p.device.type not in ("cpu", "cuda"):
            raise ValueError(f"parameter {name}: on {p.device}; the learner copies CPU and CUDA "
                             "tensors")
        if not p.is_contiguous():
            raise ValueError(f"parameter {name}: not contiguous; the learner copies slices of "
                             "its flattened storage")
        key = (p.device, p.data_ptr())
        if key in where:
            raise ValueError(f"parameter {name}: the same memory as {where[key]} (a tied weight "
                             "is one parameter: give it once)")
        where[key] = name
