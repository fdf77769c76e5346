"""Copies between a learner's parameters and its flat fp32 host buffer, one fragment at a time.

The sync client (C++, learner.cc) calls `fetch(fragment)` when it is about to read or write a
fragment's values and `store(fragments)` after it wrote them. A fragment is a list of slices,
each part of one tensor's flattened values: (tensor index, start, stop, offset in the buffer).

  fetch: parameter -> buffer, upcast to fp32. On CUDA the slices are converted on the device
         and copied into the pinned buffer asynchronously, then the current stream is waited
         for once: the client reads the values as soon as fetch returns.
  store: buffer -> parameter, rounded once to the parameter's dtype (round to nearest even).
         On CUDA the copies go on a side stream, from pinned memory and non-blocking (fp32 is
         copied up, then converted on the device), after the side stream waits for the current
         one; the current (training) stream then waits for the side stream, so the next step's
         kernels see the new values and the training thread does not wait for the copy. On the
         CPU they are plain copies.

The buffer is not written again before a stored range has left it: the client touches a
fragment's part of the buffer only after a fetch of it, which waits for the current stream,
which waits for the side stream's copies.

Slices are taken from each parameter when copying (not kept as views), so a parameter whose
.data was replaced by one of the same shape, dtype and device is followed.
"""
import torch


def merged_ranges(ranges):
    """(tensor, start, stop) ranges sorted by tensor and start, adjacent ones merged into one."""
    merged = []
    for t, start, stop in sorted(ranges):
        if merged and merged[-1][0] == t and merged[-1][2] == start:
            merged[-1] = (t, merged[-1][1], stop)
        else:
            merged.append((t, start, stop))
    return merged


class Copier:
    def __init__(self, tensors, host):
        self._tensors = tensors  # the parameters, in manifest order
        self._host = host  # flat fp32, pinned when any parameter is on CUDA
        self._fragments = []  # per fragment: [(tensor, start, stop, host view)]
        self._side = {}  # CUDA device -> the side stream of its stores

    def set_fragments(self, fragment_slices):
        self._fragments = [[(t, start, stop, self._host[flat:flat + stop - start])
                            for t, start, stop, flat in slices] for slices in fragment_slices]

    def _flat(self, t):
        p = self._tensors[t]
        if not p.is_contiguous():  # checked at the start; a later .data swap could break it
            raise RuntimeError(f"parameter {t} is no longer contiguous")
        return p.detach().view(-1)

    @torch.no_grad()
    def fetch(self, fragment):
        waits = set()
        for t, start, stop, host in self._fragments[fragment]:
            src = self._flat(t)[start:stop]
            if src.is_cuda:
                if src.dtype != torch.float32:
                    src = src.float()  # on the device: the copy down is fp32 into pinned memory
                host.copy_(src, non_blocking=True)
                waits.add(src.device)
            else:
                host.copy_(src)
        for device in waits:
            torch.cuda.current_stream(device).synchronize()

    @torch.no_grad()
    def store(self, fragments):
        sides = {}  # CUDA device -> its side stream, once it waited for the current stream
        for fragment in fragments:
            for t, start, stop, host in self._fragments[fragment]:
                dst = self._flat(t)[start:stop]
                if not dst.is_cuda:
                    dst.copy_(host)
                    continue
                side = sides.get(dst.device)
                if side is None:
                    side = self._side.get(dst.device)
                    if side is None:
                        side = self._side[dst.device] = torch.cuda.Stream(dst.device)
                    side.wait_stream(torch.cuda.current_stream(dst.device))
                    sides[dst.device] = side
                with torch.cuda.stream(side):
                    if dst.dtype == torch.float32:
                        dst.copy_(host, non_blocking=True)
                    else:  # fp32 up (asynchronous from pinned memory), rounded on the device
                        dst.copy_(host.to(dst.device, non_blocking=True))
        for device, side in sides.items():
            torch.cuda.current_stream(device).wait_stream(side)

    def slices(self, fragments):
        """(tensor index, start, stop) of the fragments' slices, by tensor, adjacent ones merged."""
        return merged_ranges((t, start, stop) for f in fragments
                             for t, start, stop, _ in self._fragments[f])
