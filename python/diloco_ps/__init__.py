"""diloco_ps: a PyTorch training loop as a learner of the DiLoCo parameter server.

    import diloco_ps
    model = model.to("cuda", torch.bfloat16)            # any of CPU/CUDA, fp32/bf16/fp16
    learner = diloco_ps.Learner(servers=["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"],
                                worker_id=3, params=model, model="hf:/data/llm",
                                codec="int8", inner_steps=50)
    learner.join()                       # theta(0) from the fleet (or uploaded from the model)
    for batch in data:
        loss = model(batch).backward(); optimizer.step(); optimizer.zero_grad()
        learner.after_step(tokens=batch.numel())   # pushes due deltas, adopts new fragments
    learner.drain()                      # waits for the last pushes to be answered

The parameters stay where they are and keep their storage: the learner holds the fp32 state
on the host and copies a fragment's parameters down only when the sync client reads them (a
due push, an adoption, a theta(0) request) and up only where it wrote them (an adoption, the
join); `learner.last_written()` says which ranges the last call wrote. The precision contract
(what is pushed and adopted for bf16/fp16 parameters) and the memory per parameter are in
docs/pytorch.md.

The learner's options (codec, H, fragments, adoption, CURVE keys, ...) are keywords with
defaults, or one `diloco_ps.LearnerOptions`; `help(diloco_ps.Learner)` lists each with its
default and meaning.

The shards compute the plan from the model's names and shapes, as the C++ worker does:
`write_manifest(model, path)` writes the file `diloco-server --model=manifest:PATH` serves, and
a PyTorch model joins a fleet of C++ workers when its parameters carry the same names and
shapes (GPT-2 as in examples/gpt2_learner.py). With `model=` naming the shards' --model source,
the parameters are matched to it by name whatever order the module lists them in; without it,
they must come in the manifest's order. Failures raise: TimeoutError when the shards
do not answer the join in time (the learner keeps joining in the background; after_step() takes
each fragment as it arrives), RuntimeError with the shard's reason when a shard refuses the plan
or the model (naming the first differing tensor where it can), ValueError for bad arguments.
"""
from ._version import __version__

try:
    import torch
except ImportError as e:
    import sys as _sys
    raise ImportError(
        f"diloco_ps needs PyTorch: the module torch cannot be imported by {_sys.executable} "
        f"({e}). On Debian: apt install python3-torch, and make a virtual environment with "
        "`python3 -m venv --system-site-packages DIR` so that it sees it; elsewhere install "
        "torch with pip into this interpreter's environment.") from e

from ._diloco_ps import checksum as _checksum
from ._learner import Learner, LearnerOptions
from ._manifest import write_manifest
from .island import Island

__all__ = ["Island", "Learner", "LearnerOptions", "__version__", "checksum", "write_manifest"]


def checksum(tensor):
    """48 bits of the XXH3-64 of a tensor's values as float32, as diloco-worker logs
    params_checksum for its model (use the parameters concatenated in manifest order)."""
    return _checksum(tensor.detach().to("cpu", torch.float32).contiguous().reshape(-1).numpy())
