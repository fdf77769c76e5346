"""The parameters a learner syncs, checked once and described as the manifest the shards plan from.

A model is given as an nn.Module (its named_parameters()), a dict, or (name, tensor) pairs: in
the order the manifest lists them, or in any order when the shards' model source is named
(by_source orders them by its names). Every check raises ValueError naming the tensor and the
cause before anything is allocated or changed, so a refused model is left as it was.
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


def by_source(named, source, spec):
    """`named` in the order of `source`, the [(name, shape)] of the shards' model source `spec`
    (the native model_source). Refuses, naming the tensors, a name the source has that the model
    lacks, a name the model has that the source lacks, and a shape that differs."""
    mine = dict(named)
    theirs = dict(source)
    missing = [n for n, _ in source if n not in mine]
    extra = [n for n, _ in named if n not in theirs]
    shapes = [f"{n} is {list(mine[n].shape)} in the model, {list(s)} in the source"
              for n, s in source if n in mine and list(mine[n].shape) != list(s)]
    problems = []
    if missing:
        problems.append("the model lacks " + ", ".join(missing))
    if extra:
        problems.append("the source lacks " + ", ".join(extra))
    if shapes:
        problems.append("shapes differ: " + "; ".join(shapes))
    if problems:
        raise ValueError(f"model={spec}: the parameters are not the source's tensors: " +
                         "; ".join(problems))
    return [(n, mine[n]) for n, _ in source]
