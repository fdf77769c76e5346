"""Collectives whose tensors outlive the process group's worker threads (used by Island).

Why: in torch 1.13 (Debian 12's python3-torch) a gloo collective's work object keeps its tensors
until one of the process group's worker threads drops it, a moment AFTER wait() has returned on
the caller's thread. If Python dropped its last reference to such a tensor first, the tensor's
Python object is kept alive by the tensor and freed by that worker thread, which must take the
GIL to do it. If the main thread is at that moment in ProcessGroupGloo's destructor (run when
DistributedDataParallel's reducer is freed, at exit, with the GIL held), it waits for the worker
thread to end while the worker thread waits for the GIL: the process never exits. A rank of an
island that raised (a refused join) and ended at once hung this way in CI; a rank pinned to one
CPU hangs so every time (tests/python/island_test.py pins its ranks).

The remedy: every tensor this module hands to a collective is held here for the holder's life,
so a worker thread never drops the last reference. The fixed-size ones are allocated once and
reused (the per-call header, one staging buffer per dtype and device for data, its views cached
per length); the few object messages (construction, a failure's reason) are kept in a list.
"""
import pickle

import torch
import torch.distributed as dist


class HeldCollectives:
    """Broadcasts and gathers over `group` from group rank 0 (global rank `src`); every tensor
    they use is held by this object."""

    def __init__(self, group, src, rank, size):
        self.group, self.src, self.rank, self.size = group, src, rank, size
        self._kept = []  # tensors of object messages: few (construction, failures)
        self._staging = {}  # (dtype, device) -> the buffer data broadcasts go through
        self._views = {}  # (dtype, device, n) -> its first n elements

    def broadcast(self, tensor):
        """Rank 0's `tensor` to every rank; the caller holds `tensor` (a header, a staging
        view) for as long as this object lives."""
        dist.broadcast(tensor, src=self.src, group=self.group)

    def broadcast_object(self, obj):
        """Rank 0's `obj` (picklable) to every rank; returns it on every rank."""
        data = pickle.dumps(obj) if self.rank == 0 else b""
        length = torch.tensor([len(data)], dtype=torch.int64)
        self._kept.append(length)
        self.broadcast(length)
        buf = self._bytes(data, int(length))
        self.broadcast(buf)
        return pickle.loads(buf.numpy().tobytes())

    def all_gather_object(self, obj):
        """Every rank's `obj` (picklable) to every rank, in rank order."""
        data = pickle.dumps(obj)
        length = torch.tensor([len(data)], dtype=torch.int64)
        lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        self._kept += [length, *lengths]
        dist.all_gather(lengths, length, group=self.group)
        longest = max(int(n) for n in lengths)
        mine = self._bytes(data.ljust(longest, b"\0"), longest)
        bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(self.size)]
        self._kept += bufs
        dist.all_gather(bufs, mine, group=self.group)
        return [pickle.loads(b.numpy().tobytes()[:int(n)]) for b, n in zip(bufs, lengths)]

    def staging(self, dtype, device, n, capacity):
        """A held tensor of `n` elements of `dtype` on `device`: the first n of one buffer of
        `capacity` elements per dtype and device (allocated on first use; n <= capacity)."""
        key = (dtype, torch.device(device))
        view = self._views.get(key + (n,))
        if view is None:
            buf = self._staging.get(key)
            if buf is None:
                buf = self._staging[key] = torch.empty(capacity, dtype=dtype, device=device)
            assert n <= buf.numel(), f"staging of {n} elements, capacity {buf.numel()}"
            view = self._views[key + (n,)] = buf[:n]
        return view

    def _bytes(self, data, length):
        """A held uint8 tensor of `length` bytes: `data` on rank 0 (or every rank's own)."""
        buf = torch.zeros(length, dtype=torch.uint8)
        if data:
            buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        self._kept.append(buf)
        return buf
