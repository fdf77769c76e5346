"""diloco_ps: a PyTorch training loop as a learner of the DiLoCo parameter server.

    import diloco_ps
    learner = diloco_ps.Learner(servers=["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"],
                                worker_id=3, params=model.named_parameters(),
                                codec="int8", inner_steps=50)
    learner.join()                       # theta(0) from the fleet (or uploaded from the model)
    for batch in data:
        loss = model(batch).backward(); optimizer.step(); optimizer.zero_grad()
        learner.after_step(tokens=batch.numel())   # pushes due deltas, adopts new fragments
    learner.drain()                      # waits for the last pushes to be answered

The constructor moves every parameter into one flat float32 CPU buffer, in named_parameters()
order, and leaves each parameter a view of it (`learner.flat`); the sync client reads deltas
from that buffer and writes adopted global values into it in place, between steps, so no copy
of the model is made per step. Create the learner before the optimizer, or at least before the
optimizer's first step (the parameters keep their identity; only their storage moves).

The shards compute the plan from the model's names and shapes, as the C++ worker does: a
PyTorch model joins a fleet of C++ workers when its parameters carry the same names, shapes and
order (GPT-2 as in examples/gpt2_learner.py: GPT2Model's names, nn.Linear's [out, in]).
Failures raise: TimeoutError when the shards do not answer the join in time (the learner keeps
joining in the background; after_step() takes each fragment as it arrives), RuntimeError with
the shard's reason when a shard refuses the plan or the model, ValueError for bad arguments.
"""
import time

import torch

from ._diloco_ps import Learner as _Native
from ._diloco_ps import checksum as _checksum

__all__ = ["Learner", "checksum"]


def checksum(tensor):
    """48 bits of the XXH3-64 of a float32 tensor's values, as diloco-worker logs
    params_checksum for its model (use the parameters concatenated in manifest order)."""
    return _checksum(tensor.detach().to(torch.float32).contiguous().reshape(-1).numpy())


class Learner:
    def __init__(self, servers, worker_id, params, codec="int8:256", inner_steps=50, fragments=4,
                 generation=0, dylu=False, stream=True, adopt="keep", adopt_alpha=0.0,
                 lockstep=False, error_feedback=True):
        named = list(params)
        if not named:
            raise ValueError("no parameters")
        for name, p in named:
            if p.device.type != "cpu" or p.dtype != torch.float32:
                raise ValueError(f"{name}: {p.dtype} on {p.device}; the learner needs float32 "
                                 "CPU parameters")
        total = sum(p.numel() for _, p in named)
        self.flat = torch.empty(total, dtype=torch.float32)
        offset = 0
        with torch.no_grad():
            for _, p in named:
                n = p.numel()
                view = self.flat[offset:offset + n]
                view.copy_(p.reshape(-1))
                p.data = view.view(p.shape)
                offset += n
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        if generation == 0:
            generation = time.time_ns() // 1000
        self.names = [name for name, _ in named]
        self._native = _Native(list(servers), worker_id, self.names,
                               [list(p.shape) for _, p in named], self.flat.numpy(), codec,
                               inner_steps, fragments, generation, dylu, stream, adopt,
                               adopt_alpha, lockstep, error_feedback)

    def join(self, timeout=60.0):
        """Joins every shard: uploads this model as theta(0) where a fragment has none, then
        overwrites it with the fleet's model."""
        self._native.join(float(timeout))

    def after_step(self, tokens):
        """After each optimizer step: `tokens` is the number of tokens the step trained on."""
        self._native.after_step(int(tokens))

    def drain(self, timeout=10.0):
        """A clean stop: no new pushes; waits until every push is answered and adopts what
        arrives meanwhile."""
        self._native.drain(float(timeout))

    @property
    def stats(self):
        """Counters: pushes, applied, adoptions, stale, refused, bytes_sent, versions, ..."""
        return self._native.stats()

    def take_events(self):
        """Sync events since the last call: (kind, fragment, detail) tuples (a refusal's detail
        is the shard's reason)."""
        return self._native.take_events()

    def checksum(self):
        """48 bits of the parameters' XXH3-64, as diloco-worker logs params_checksum."""
        return self._native.checksum()

    @property
    def joined(self):
        return self._native.joined

    @property
    def plan_fingerprint(self):
        return self._native.plan_fingerprint
