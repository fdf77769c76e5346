"""diloco_ps.Island: a group of torch.distributed ranks that train one model as ONE learner.

An island is a set of ranks (a DDP job on one host or a few) that keeps one replicated model:
every rank holds every parameter, and the ranks stay identical because DDP averages the
gradients. A learner per rank would push the same delta once per rank; an island pushes it once.

    dist.init_process_group("nccl")                 # or gloo; every rank runs this
    model = DistributedDataParallel(model.to(device), device_ids=[device])
    island = diloco_ps.Island(servers=..., worker_id=3, params=model, model="hf:/data/llm",
                              inner_steps=50)
    island.join()
    for batch in loader:                            # this rank's share of the island's batch
        loss = model(batch); loss.backward(); optimizer.step(); optimizer.zero_grad()
        island.after_step(tokens=batch.numel() * dist.get_world_size())
    island.drain()

Design:
  - Rank 0 of the group owns the diloco_ps.Learner, the only one that talks to the shards (one
    worker id, one delta per fragment and round). It reads its own parameters, which under DDP
    are every rank's.
  - Every rank calls join(), after_step(tokens) and drain() at the same points. `tokens` is the
    island's tokens for the step, all ranks together; rank 0's value is the one used (pass the
    same on every rank).
  - After rank 0's call, rank 0 broadcasts a header over the control group: a status and one
    flag per fragment written (the learner's last_written(): the fragments adopted this step).
    Then the written ranges are broadcast from rank 0 over the group, packed per dtype into
    buckets (bucket_mb), in the parameters' own dtype, so every rank holds rank 0's values bit
    for bit. join() and drain() broadcast the whole model.
  - A step with nothing written costs one broadcast of (1 + fragments) int64 on the control
    group and nothing on the devices. With an NCCL group the control group is a gloo group of
    the same ranks (created here for the default group; pass control_group for another), so the
    flag never waits for the GPU's queue.
  - Failures: when rank 0's call raises, the header says so, the message follows, and every
    rank raises the same type (TimeoutError, ValueError, RuntimeError) naming rank 0's reason,
    instead of waiting in a collective. What rank 0 wrote before failing (a join that timed
    out: the fragments that joined) is broadcast first, so the ranks stay identical.
  - Construction is collective too: the ranks' parameter lists (names, shapes, dtypes) must be
    rank 0's, checked once; the fragment layout is sent from rank 0.
  - Every tensor handed to a collective is held by the island for its life (the header, one
    staging buffer per dtype and device of at most bucket_mb, the object messages): with
    torch 1.13's gloo a tensor whose last reference a worker thread drops can hang the process
    at exit (python/diloco_ps/_held.py says how). End with drain() and
    dist.destroy_process_group() while the island is alive.

Not supported: FSDP (a rank holds a shard of the parameters; the learner needs the whole
fragment on rank 0 at each push, i.e. an all-gather of the fragment due at push time and a
scatter of what was adopted) and DTensor parameters: both are refused with ValueError.
Pipeline or tensor parallelism (ranks holding different parameters) would be one island per
stage or shard with its own part of the manifest; not supported either.
"""
import torch
import torch.distributed as dist

from . import _params
from ._copies import merged_ranges
from ._diloco_ps import checksum as _checksum
from ._held import HeldCollectives
from ._learner import Learner

# Header status: what rank 0's call did.
OK, TIMEOUT, VALUE, FAILED = 0, 1, 2, 3
_RAISES = {TIMEOUT: TimeoutError, VALUE: ValueError, FAILED: RuntimeError}


def _status(error):
    if error is None:
        return OK
    if isinstance(error, TimeoutError):
        return TIMEOUT
    if isinstance(error, ValueError):
        return VALUE
    return FAILED


def _module_params(params):
    """(name, tensor) pairs of a module (DDP unwrapped), a dict or pairs; FSDP refused."""
    if isinstance(params, torch.nn.parallel.DistributedDataParallel):
        params = params.module
    if isinstance(params, torch.nn.Module):
        for m in params.modules():
            if type(m).__name__ in ("FullyShardedDataParallel", "FSDPModule"):
                raise ValueError("an FSDP module: an island needs every parameter whole on every "
                                 "rank (DDP or a replicated module); FSDP is not supported")
    named = _params.named_tensors(params)
    for name, p in named:
        if type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor":
            raise ValueError(f"parameter {name}: a DTensor (sharded); an island needs every "
                             "parameter whole on every rank")
    return named


class Island:
    """One learner for a group of ranks that hold the same model (see the module's header).

    Every rank of `group` (default: all) constructs it with the same arguments; `servers`,
    `worker_id` and `options` (those of diloco_ps.Learner) are used on rank 0 only. `params`: a
    module (a DistributedDataParallel is unwrapped: its names are the module's), a dict or
    (name, tensor) pairs, the same names, shapes and dtypes in the same order on every rank.
    `model`: the shards' model source as they were started with it ("hf:DIR", "manifest:PATH",
    ...), as for a Learner: rank 0's learner matches the parameters to its tensors by name (a
    mismatch raises ValueError naming the tensors on every rank); without it the parameters are
    in the manifest's order. `control_group`: a gloo group of the same ranks for the per-step
    header (default: the group itself when it is gloo, a new gloo group when the group is the
    default one).
    CURVE: `curve_server_key` and `curve_secret_key_file` among `options`, as for a Learner;
    only rank 0 reads the key files, so only its host needs the island's secret key. A refused
    key raises on every rank, naming the shard."""

    def __init__(self, servers, worker_id, params, group=None, control_group=None,
                 bucket_mb=64, model=None, **options):
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("torch.distributed is not initialised (init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._src = 0 if group is None else dist.get_global_rank(group, 0)
        if control_group is None:
            if dist.get_backend(group) == dist.Backend.GLOO:
                control_group = group
            elif group is None:
                control_group = dist.new_group(backend="gloo")
            else:
                raise ValueError("a group that is not gloo needs control_group: a gloo group of "
                                 "the same ranks (new_group(ranks, backend='gloo'))")
        self._control = control_group
        self._bucket = max(1, int(bucket_mb * 2**20))  # bytes per data broadcast, at most
        self._held_control = HeldCollectives(control_group, self._src, self.rank, self.size)
        self._held_data = HeldCollectives(group, self._src, self.rank, self.size)
        self.learner = None
        self.counters = dict(calls=0, header_broadcasts=0, header_bytes=0, data_broadcasts=0,
                             data_bytes=0, written_calls=0)
        self._written = []

        error, description = None, None
        try:
            named = _module_params(params)
            description = _params.describe(named)
            _params.check_copyable(named)
        except ValueError as e:
            error = e
        if error is None and self.rank == 0:
            try:
                self.learner = Learner(servers, worker_id, named, model=model, **options)
            except Exception as e:  # noqa: BLE001 - sent to every rank, raised there
                error = e
        # Rank 0's outcome, model and fragment layout to every rank; each rank's own check back.
        ok0 = error is None if self.rank == 0 else None
        layout = None
        if self.rank == 0 and self.learner is not None:
            index = {n: i for i, n in enumerate(description[0])}
            layout = [[(index[n], s.start, s.stop) for n, s in frag]
                      for frag in self.learner.fragments()]
        sent = (ok0, _status(error), str(error) if error else "", description, layout)
        ok0, status0, message0, description0, layout = self._held_control.broadcast_object(sent)
        mine = ""
        if error is not None and self.rank != 0:
            mine = f"rank {self.rank}: {error}"
        elif self.rank != 0 and ok0 and description != description0:
            mine = f"rank {self.rank}: its parameters (names, shapes, dtypes) are not rank 0's"
        gathered = self._held_control.all_gather_object(mine)
        if not ok0:
            if self.rank == 0:
                raise error
            raise _RAISES[status0](f"rank 0 could not start the island's learner: {message0}")
        problems = [g for g in gathered if g]
        if problems:
            raise ValueError("the island's ranks do not hold the same model: " +
                             "; ".join(problems))
        self.names = description0[0]
        self._tensors = [p for _, p in named]
        self._layout = layout  # per fragment: [(tensor index, start, stop)]
        self._header = torch.zeros(1 + len(layout), dtype=torch.int64)  # held, reused
        self._elements = {}  # dtype -> the model's elements of it (staging: at most a bucket)
        for p in self._tensors:
            self._elements[p.dtype] = self._elements.get(p.dtype, 0) + p.numel()

    # The calls every rank makes.

    def join(self, timeout=60.0):
        """Rank 0 joins (Learner.join), then the whole model goes from rank 0 to every rank.
        Raises on every rank what rank 0's join raised: TimeoutError (the fragments that joined
        are written and broadcast; the others join in the background and a later after_step
        adopts and broadcasts them), RuntimeError when a shard refuses the model (nothing
        written)."""
        self._call(lambda: self.learner.join(timeout), whole=True)

    def after_step(self, tokens):
        """After each optimizer step on every rank: `tokens` is the island's tokens for the
        step (all ranks together; rank 0's value is used). Rank 0 runs Learner.after_step;
        the ranges it wrote are broadcast to every rank. Returns them as (name, slice) pairs
        over each parameter's flattened elements ([] on a step that wrote nothing)."""
        return self._call(lambda: self.learner.after_step(tokens), whole=False)

    def drain(self, timeout=10.0):
        """Rank 0 drains (Learner.drain), then the whole model goes from rank 0 to every
        rank."""
        self._call(lambda: self.learner.drain(timeout), whole=True)

    def last_written(self):
        """The ranges the last join, after_step or drain wrote on this rank, as (name, slice)
        pairs (the whole model after a join or drain)."""
        return list(self._written)

    def fragments(self):
        """Each fragment's ranges, (name, slice) pairs, the same on every rank."""
        return [self._named([f]) for f in range(len(self._layout))]

    def checksum(self):
        """This rank's parameters' checksum (upcast to fp32, in manifest order), as
        diloco_ps.checksum of them concatenated; no collective."""
        with torch.no_grad():
            flat = torch.cat([p.detach().to("cpu", torch.float32).reshape(-1)
                              for p in self._tensors])
        return _checksum(flat.contiguous().numpy())

    def checksums(self):
        """Every rank's checksum(), in rank order; a collective: every rank calls it. (Use this,
        not dist.all_gather_object, near the end of a run: see _held.py.) Gathered through
        held tensors allocated on the first call and reused."""
        if not hasattr(self, "_sums"):
            self._sums = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size + 1)]
        mine, every = self._sums[0], self._sums[1:]
        mine[0] = (self.checksum() + 2**63) % 2**64 - 2**63  # the uint64 as an int64
        dist.all_gather(every, mine, group=self._control)
        return [int(t[0]) % 2**64 for t in every]

    @property
    def is_leader(self):
        """True on rank 0, the rank that holds the learner."""
        return self.rank == 0

    # The protocol.

    def _call(self, fn, whole):
        fragments = len(self._layout)
        header = self._header
        error = None
        if self.rank == 0:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - sent to every rank, raised there
                error = e
            status = _status(error)
            if whole and status in (OK, TIMEOUT):
                written = range(fragments)  # a refused join wrote nothing
            else:
                written = self._fragments_of(self.learner.last_written())
            header.zero_()
            header[0] = status
            for f in written:
                header[1 + f] = 1
        self._held_control.broadcast(header)
        self.counters["calls"] += 1
        self.counters["header_broadcasts"] += 1
        self.counters["header_bytes"] += header.numel() * header.element_size()
        flags = header.tolist()
        status = flags[0]
        message = str(error) if error is not None else ""
        if status != OK:  # only on a failure: the reason, for the other ranks' exception
            message = self._held_control.broadcast_object(message)
        written = [f for f in range(fragments) if flags[1 + f]]
        self._written = self._named(written)
        if written:
            self.counters["written_calls"] += 1
            self._broadcast(self._ranges(written))
        if status != OK:
            if self.rank == 0:
                raise error
            raise _RAISES[status](f"the island's learner (rank 0) failed: {message}")
        return list(self._written)

    def _fragments_of(self, ranges):
        """The fragments whose ranges lie in `ranges` ((name, slice) pairs: whole fragments,
        adjacent ones merged, as Learner.last_written() gives them)."""
        index = {n: i for i, n in enumerate(self.names)}
        spans = [(index[n], s.start, s.stop) for n, s in ranges]
        out = []
        for f, frag in enumerate(self._layout):
            t, start, stop = frag[0]
            if any(t == u and a <= start and stop <= b for u, a, b in spans):
                out.append(f)
        return out

    def _ranges(self, fragments):
        """(tensor, start, stop) of the fragments, by tensor, adjacent ones merged."""
        return merged_ranges(r for f in fragments for r in self._layout[f])

    def _named(self, fragments):
        return [(self.names[t], slice(start, stop)) for t, start, stop in self._ranges(fragments)]

    @torch.no_grad()
    def _broadcast(self, ranges):
        """Rank 0's values of `ranges` to every rank: per dtype (in the order the ranges first
        meet it, the same on every rank), in buckets of at most bucket_mb, each one broadcast
        over the group through the held staging buffer of its dtype on the first piece's
        device."""
        by_dtype = {}
        for t, start, stop in ranges:
            p = self._tensors[t]
            by_dtype.setdefault(p.dtype, []).append((p, start, stop))
        for dtype, pieces in by_dtype.items():
            cap = max(1, self._bucket // torch.empty((), dtype=dtype).element_size())
            for bucket in _buckets(pieces, cap):
                device = bucket[0][0].device
                capacity = min(cap, self._elements[dtype])
                buf = self._held_data.staging(dtype, device, sum(b - a for _, a, b in bucket),
                                              capacity)
                if self.rank == 0:
                    at = 0
                    for p, a, b in bucket:
                        buf[at:at + b - a].copy_(p.detach().view(-1)[a:b])
                        at += b - a
                self._held_data.broadcast(buf)
                self.counters["data_broadcasts"] += 1
                self.counters["data_bytes"] += buf.numel() * buf.element_size()
                if self.rank != 0:
                    at = 0
                    for p, a, b in bucket:
                        p.detach().view(-1)[a:b].copy_(buf[at:at + b - a])
                        at += b - a


def _buckets(pieces, cap):
    """`pieces` ((tensor, start, stop)) cut into lists of at most `cap` elements, in order."""
    bucket, n = [], 0
    for p, start, stop in pieces:
        while start < stop:
            take = min(stop - start, cap - n)
            bucket.append((p, start, start + take))
            n += take
            start += take
            if n == cap:
                yield bucket
                bucket, n = [], 0
    if bucket:
        yield bucket
