"""diloco_ps.Learner: a PyTorch training loop as one learner of the DiLoCo parameter server.

The parameters stay where they are (CPU or CUDA; float32, bfloat16 or float16) and keep their
storage. The learner holds the fp32 state on the host: a flat buffer in manifest order (pinned
when a parameter is on CUDA) that the C++ sync client works in, copying a fragment's
parameters down only when it reads them and back up only when it wrote them (_copies.py,
learner.cc). The precision contract is in docs/pytorch.md ("Precision").
"""
import time

import torch

from . import _params
from ._copies import Copier
from ._diloco_ps import Learner as _Native


class Learner:
    def __init__(self, servers, worker_id, params, codec="int8:256", inner_steps=50, fragments=4,
                 generation=0, dylu=False, stream=True, adopt="keep", adopt_alpha=0.0,
                 lockstep=False, error_feedback=True, auto_codecs="int8:256,int4:256",
                 inner_steps_min=50, inner_steps_max=2000, link_margin=1.5,
                 curve_server_key=None, curve_secret_key_file=None):
        """codec="auto" chooses the push codec among `auto_codecs` (finest first) from the
        measured link, inner_steps="auto" chooses H from `inner_steps_min` to `inner_steps_max`
        (docs/worker.md, "Codec and H from the link").

        CURVE (docs/security.md), both or neither, as diloco-worker's --curve_* flags:
        `curve_server_key`, the shards' public key as Z85 text or a file holding it (e.g.
        keys/server.public from diloco-ctl keys), and `curve_secret_key_file`, this learner's
        secret key file (keys/worker-ID.secret), whose public key the shards list for
        `worker_id`. One without the other or a bad key raises ValueError; a shard that refuses
        the key, or whose key is not `curve_server_key`, makes join() raise RuntimeError naming
        the shard's address."""
        named = _params.named_tensors(params)
        names, shapes, dtypes = _params.describe(named)
        _params.check_copyable(named)
        tensors = [p for _, p in named]
        pinned = torch.cuda.is_available() and any(p.is_cuda for p in tensors)
        host = torch.empty(sum(p.numel() for p in tensors), dtype=torch.float32,
                           pin_memory=pinned)
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        if generation == 0:
            generation = time.time_ns() // 1000
        self.names = names
        self.worker_id = worker_id
        self.steps = 0    # after_step calls, over every run this learner's state went through
        self.tokens = 0   # and the tokens they reported
        self._copier = Copier(tensors, host)
        self._native = _Native(list(servers), worker_id, names, shapes, dtypes, host.numpy(),
                               self._copier.fetch, self._copier.store, codec, str(inner_steps),
                               fragments, generation, dylu, stream, adopt, adopt_alpha, lockstep,
                               error_feedback, auto_codecs, inner_steps_min, inner_steps_max,
                               link_margin, _path_or_text(curve_server_key),
                               _path_or_text(curve_secret_key_file))
        self._copier.set_fragments(self._native.fragment_slices())

    def join(self, timeout=60.0):
        """Joins every shard: uploads this model as theta(0) where a fragment has none, then
        overwrites the parameters with the fleet's model (all of them: the join copies the whole
        model down and up). Raises TimeoutError when not every fragment joined in time (those
        that did are written; the others join in the background and after_step adopts them),
        RuntimeError when a shard refuses the model (nothing written)."""
        self._native.join(float(timeout))

    def after_step(self, tokens, loss=None):
        """After each optimizer step: `tokens` is the number of tokens the step trained on, and
        `loss` (optional) the step's training loss, whose moving average the shards show
        (diloco-ctl top, /metrics). Copies down only the fragments due (a push, an adoption, a
        theta(0) request) and copies up only those written; a step with nothing due touches no
        parameter."""
        self._native.after_step(int(tokens), None if loss is None else float(loss))
        self.steps += 1
        self.tokens += int(tokens)

    def state_dict(self):
        """The learner's own state, to save beside the optimizer's and the data loader's when
        the training loop checkpoints (docs/pytorch.md, "Stopping and continuing"): the steps and
        tokens it has seen, for this worker id and model. The parameters are not in it: a
        learner that starts again joins as a new generation and takes the fleet's model."""
        return {"format": 1, "worker_id": int(self.worker_id),
                "model_fingerprint": self.model_fingerprint, "steps": int(self.steps),
                "tokens": int(self.tokens)}

    def load_state_dict(self, state):
        """Takes a state_dict() back, before join(). Raises ValueError naming the difference
        for a state of another worker id or model, or one that is not such a dict; nothing
        changes then."""
        if not isinstance(state, dict) or state.get("format") != 1:
            raise ValueError(f"load_state_dict: not a diloco_ps learner state (format 1): "
                             f"{state!r:.200}")
        for key in ("steps", "tokens"):
            if not isinstance(state.get(key), int) or state[key] < 0:
                raise ValueError(f"load_state_dict: '{key}' must be an int >= 0, got "
                                 f"{state.get(key)!r}")
        if state.get("worker_id") != self.worker_id:
            raise ValueError(f"load_state_dict: the state is worker {state.get('worker_id')}'s, "
                             f"this learner is worker {self.worker_id}")
        if state.get("model_fingerprint") != self.model_fingerprint:
            raise ValueError(f"load_state_dict: the state is of another model (fingerprint "
                             f"{state.get('model_fingerprint')}, this one "
                             f"{self.model_fingerprint})")
        self.steps, self.tokens = state["steps"], state["tokens"]

    def drain(self, timeout=10.0):
        """A clean stop: no new pushes; waits until every push is answered and adopts what
        arrives meanwhile (the whole model is copied down, and what was adopted back up); then
        tells every shard this learner leaves, so that no round waits for it any more (a
        learner that starts again later joins as a new generation)."""
        self._native.drain(float(timeout))

    def last_written(self):
        """The parameter ranges the last join, after_step or drain wrote, as (name, slice)
        pairs in manifest order, a slice being over the parameter's flattened elements
        (p.view(-1)[slice]); [] when it wrote nothing. What a wrapper that trains the same
        model on several ranks sends from the rank holding the learner to the others."""
        return self._named(self._native.last_written())

    def fragments(self):
        """Each fragment's parameter ranges, (name, slice) pairs as in last_written()."""
        return [self._named([f]) for f in range(len(self._native.fragment_slices()))]

    def _named(self, fragments):
        return [(self.names[t], slice(start, stop))
                for t, start, stop in self._copier.slices(fragments)]

    def global_params(self):
        """The fleet's fp32 values this learner adopted last, flat in manifest order (a copy;
        zeros where a fragment has not joined)."""
        return torch.from_numpy(self._native.global_params())

    @property
    def stats(self):
        """Counters: pushes, applied, adoptions, stale, refused, bytes_sent, versions, ...; and
        the copies: fetched_fragments, stored_fragments, fetch_us, store_us."""
        return self._native.stats()

    def take_events(self):
        """Sync events since the last call: (kind, fragment, detail) tuples (a refusal's detail
        is the shard's reason)."""
        return self._native.take_events()

    def checksum(self):
        """48 bits of the XXH3-64 of the parameters upcast to fp32 in manifest order, as
        diloco-worker logs params_checksum (copies the whole model down)."""
        return self._native.checksum()

    @property
    def joined(self):
        return self._native.joined

    @property
    def plan_fingerprint(self):
        return self._native.plan_fingerprint

    @property
    def model_fingerprint(self):
        """The model's fingerprint as the shards compute it (16 hex digits: "%016x")."""
        return f"{self._native.model_fingerprint:016x}"


def _path_or_text(value):
    return "" if value is None else str(value)
