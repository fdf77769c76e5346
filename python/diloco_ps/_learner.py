"""diloco_ps.Learner: a PyTorch training loop as one learner of the DiLoCo parameter server.

The parameters stay where they are (CPU or CUDA; float32, bfloat16 or float16) and keep their
storage. The learner holds the fp32 state on the host: a flat buffer in manifest order (pinned
when a parameter is on CUDA) that the C++ sync client works in, copying a fragment's
parameters down only when it reads them and back up only when it wrote them (_copies.py,
learner.cc). The precision contract is in docs/pytorch.md ("Precision").
"""
import torch

from . import _params
from ._copies import Copier
from ._diloco_ps import Learner as _Native
from ._diloco_ps import LearnerOptions
from ._diloco_ps import model_source


class Learner:
    """One learner of the fleet: a PyTorch model's parameters synced with the shards.

        learner = diloco_ps.Learner(servers="tcp://10.0.0.1:5555,tcp://10.0.0.2:5555",
                                    worker_id=7, params=model, model="hf:/data/llama-1b",
                                    codec="int8:256", inner_steps=50, fragments=4)

    `servers`: the shards' endpoints, shard i at position i (a list, or one comma-separated
    string). `worker_id`: this learner's id, unique in the fleet. `params`: the model, usually
    the nn.Module itself (its named_parameters() are taken), or a dict or (name, tensor) pairs.
    `model`: the shards' model source as they were started with it (their --model: "hf:DIR",
    "manifest:PATH", "safetensors:PATH" or a family preset such as "tiny"); the parameters are
    then matched to its tensors by name, in whatever order the module lists them, and a name the
    source has that the model lacks, a name the model has that the source lacks, or a shape that
    differs raises ValueError naming them (nothing is changed). Without `model`, the parameters
    are taken in the order given, which must be the shards' manifest order.

    Options, as keywords (or as one diloco_ps.LearnerOptions, `options=`, which keywords then
    override); each is named, with its value, in the ValueError a bad value raises, and read the
    same way as diloco-worker's flag of the same name (docs/worker.md):

      codec="int8:256"       the push codec: fp32, bf16, fp8, int8, int4 [:block] or
                             topk:<fraction>[:block]; or "auto": one of auto_codecs, chosen from
                             the measured link ("Codec and H from the link" in docs/worker.md)
      inner_steps=50         H, the inner steps between two pushes of a fragment; or "auto": from
                             inner_steps_min to inner_steps_max, chosen from the link and the step
                             time
      fragments=4            the plan's fragments (the shards' --fragments)
      generation=0           this run's generation; 0: from the clock, new on each start
      dylu=False             Dynamic Local Updates: H scaled by this learner's relative speed
      stream=True            stagger the fragments' pushes across the H steps
      adopt="keep"           how new global values are adopted: "keep" (global + the steps taken
                             since the push) or "lerp" (global + adopt_alpha * (local - global))
      adopt_alpha=0.0        adopt="lerp" only, in [0, 1]; 0 replaces the local values
      extrapolate=1.25       adopt="keep": at each push the local values move on to anchor -
                             extrapolate x delta, so the steps trained until its answer start
                             nearer where the round lands; in [1, 3], 1 off; not applied with
                             lockstep (docs/worker.md, "Extrapolation")
      align_pushes=True      adopt="keep", not lockstep: a fragment's next push comes as many
                             steps later than H as the shard held its last one (at most H/2),
                             so the fleet's pushes leave together (docs/worker.md, "Alignment")
      lockstep=False         deterministic mode: after_step returns once its pushes are answered
                             and adopted (a fixed codec and H, not auto)
      error_feedback=True    a push's quantisation error goes into the next push (off: study only)
      auto_codecs="int8:256,int4:256,topk:0.0429"
                             codec="auto": the codecs to choose from, finest first
      inner_steps_min=50     inner_steps="auto": the smallest H
      inner_steps_max=2000   inner_steps="auto": the largest H
      link_margin=1.5        codec or inner_steps "auto": a round's transfers take at most
                             1 / margin of its steps' time (>= 1)
      curve_server_key=None  CURVE (docs/security.md): the shards' public key as Z85 text or a
                             file holding it (e.g. keys/server.public from diloco-ctl keys)
      curve_secret_key_file=None
                             CURVE: this learner's secret key file (keys/worker-ID.secret), whose
                             public key the shards list for `worker_id`

    CURVE takes both keys or neither: one without the other or a bad key raises ValueError; a
    shard that refuses the key, or whose key is not `curve_server_key`, makes join() raise
    RuntimeError naming the shard's address. An unknown keyword or a value of the wrong type
    raises TypeError.
    """

    def __init__(self, servers, worker_id, params, options=None, model=None, **keywords):
        options = _options(options, keywords)
        named = _params.named_tensors(params)
        _params.describe(named)
        if model is not None:
            if not isinstance(model, str):
                raise TypeError(f"model: the shards' model source as text (\"hf:DIR\", "
                                f"\"manifest:PATH\", ...), got {type(model).__name__}; the "
                                "module itself goes in params")
            source, _ = model_source(model)
            named = _params.by_source(named, source, model)
        names, shapes, dtypes = _params.describe(named)
        _params.check_copyable(named)
        tensors = [p for _, p in named]
        pinned = torch.cuda.is_available() and any(p.is_cuda for p in tensors)
        host = torch.empty(sum(p.numel() for p in tensors), dtype=torch.float32,
                           pin_memory=pinned)
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        self.names = names
        self.worker_id = worker_id
        self.options = options
        self.steps = 0    # after_step calls, over every run this learner's state went through
        self.tokens = 0   # and the tokens they reported
        self._copier = Copier(tensors, host)
        self._native = _Native(list(servers), worker_id, names, shapes, dtypes, host.numpy(),
                               self._copier.fetch, self._copier.store, options)
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
        """Counters: pushes, applied, adoptions, stale, refused, bytes_sent, versions,
        updates_full and updates_delta (downloads whole and as updates), download_mismatches,
        aligned_pushes, aligned_steps, ...; and the copies: fetched_fragments,
        stored_fragments, fetch_us, store_us."""
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


def _options(options, keywords):
    """The LearnerOptions of Learner(options=..., **keywords): the keywords override `options`."""
    if options is None:
        return LearnerOptions(**keywords)
    if not isinstance(options, LearnerOptions):
        raise TypeError(f"options: expected a diloco_ps.LearnerOptions, got {options!r:.100} "
                        "(give codec, inner_steps and the other options as keywords)")
    return LearnerOptions(**{**options.keywords(), **keywords}) if keywords else options
