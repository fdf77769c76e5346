"""A second, independent client of the diloco wire protocol, in Python.

Written from docs/protocol.md (above all its last section, "Writing a client"), the codec byte
layouts of docs/kernels.md ("Codecs and their byte layout") and schema/protocol.fbs, and from
nothing else: its purpose is to show that those documents suffice to speak to a shard.
client_test.py drives it against a real diloco-server.

Parts, each following the doc section named in its docstring:

* load_schema: the flatc-generated Python module of schema/protocol.fbs.
* build_header / parse_header / seal_header: the header frame, a FlatBuffers table followed by
  its checksum trailer ("Messages", "The header frame", "Constants").
* model_manifest / model_fingerprint: the tensors of a --model spec ("The manifest of
  `--model`", "Fingerprints").
* Plan / plan_fingerprint: fragment pieces and shard assignment ("The plan", "Fingerprints").
* chunk_elements, encode_fp32, encode_int8, decode_int8: chunked payloads ("Chunked payloads",
  "Constants"; kernels.md for the int8 layout).
* Connection: one DEALER with whole-message send and receive, train sending and joining
  ("Messages", "Trains").
"""

import importlib
import math
import struct
import sys
import time

import flatbuffers
import numpy as np
import xxhash
import zmq

# ---------------------------------------------------------------------------------------------
# Constants ("Writing a client" / "Constants")

PROTOCOL_VERSION = 3
MAX_HEADER_BYTES = 65536  # the whole header frame, trailer included
HEADER_MAGIC = b"DLHC"  # the trailer: these 4 bytes, then the u64 XXH3-64 of all bytes before it
HEADER_TRAILER_BYTES = len(HEADER_MAGIC) + 8
MAX_PAYLOAD_FRAMES = 4096
MAX_FRAME_BYTES = 1 << 30

CODEC_FP32, CODEC_BF16, CODEC_FP8, CODEC_INT8, CODEC_INT4 = 0, 1, 2, 3, 4
FRAGMENT_BLOCK = 256  # InitFragment and FragmentUpdate values: always codec fp32, block 256

# The enums of schema/protocol.fbs, filled in by load_schema() from the generated module.
MsgType = AckStatus = ErrorCode = Channel = None
_Header = _FragmentVersion = None


def load_schema(generated_dir):
    """Imports the flatc --python output of schema/protocol.fbs found under generated_dir.

    Sets the module globals MsgType, AckStatus, ErrorCode and Channel (the generated enum
    classes: attributes named as in the schema, e.g. MsgType.Hello).
    """
    global MsgType, AckStatus, ErrorCode, Channel, _Header, _FragmentVersion
    if generated_dir not in sys.path:
        sys.path.insert(0, generated_dir)
    MsgType = importlib.import_module("diloco.wire.MsgType").MsgType
    AckStatus = importlib.import_module("diloco.wire.AckStatus").AckStatus
    ErrorCode = importlib.import_module("diloco.wire.ErrorCode").ErrorCode
    Channel = importlib.import_module("diloco.wire.Channel").Channel
    _Header = importlib.import_module("diloco.wire.Header")
    _FragmentVersion = importlib.import_module("diloco.wire.FragmentVersion")


def enum_name(enum_class, value):
    """The schema name of an enum value (for messages), or the number if it has none."""
    for name, v in vars(enum_class).items():
        if not name.startswith("_") and v == value:
            return name
    return str(value)


# ---------------------------------------------------------------------------------------------
# The header frame ("Messages"; the table of schema/protocol.fbs)

# Scalar fields of table Header, in schema order, with their FlatBuffers slot number.
SCALAR_FIELDS = (
    "protocol_version", "type", "plan_fingerprint", "model_fingerprint", "worker_id",
    "generation", "seq", "shard", "incarnation", "fragment_id", "base_version", "version",
    "round", "tokens", "steps", "codec", "block", "num_elements", "chunk_elements", "ack",
    "error_code", "step_time_us", "fleet_step_time_us", "channel", "credit_bytes", "num_chunks",
    "chunk_index", "refused_type", "values_checksum")
VECTOR_FIELDS = ("frame_lengths", "frame_checksums", "versions")
ALL_FIELDS = SCALAR_FIELDS + VECTOR_FIELDS + ("message",)


def _camel(field):
    return "".join(part.capitalize() for part in field.split("_"))


def build_header(sealed=True, **fields):
    """Serializes one Header table into a header frame; fields are the schema's field names.

    Unset fields stay at their defaults (not stored). protocol_version defaults to
    PROTOCOL_VERSION unless given (pass 0 or another number to build a wrong one).
    frame_lengths and frame_checksums are lists of u64, versions a list of (id, version),
    message a str or bytes. The frame ends in the checksum trailer (seal_header) unless
    sealed=False (a peer of protocol version 2 or older). No size check: callers building
    malformed headers need none.
    """
    unknown = set(fields) - set(ALL_FIELDS)
    if unknown:
        raise ValueError(f"not Header fields: {sorted(unknown)}")
    fields.setdefault("protocol_version", PROTOCOL_VERSION)
    b = flatbuffers.Builder(256)
    offsets = {}
    if fields.get("message") is not None:
        msg = fields["message"]
        offsets["message"] = b.CreateString(msg if isinstance(msg, bytes) else msg.encode())
    for name in ("frame_lengths", "frame_checksums"):
        if fields.get(name) is not None:
            offsets[name] = b.CreateNumpyVector(np.asarray(fields[name], dtype="<u8"))
    if fields.get("versions") is not None:
        pairs = list(fields["versions"])
        _Header.HeaderStartVersionsVector(b, len(pairs))
        for fid, version in reversed(pairs):
            _FragmentVersion.CreateFragmentVersion(b, fid, version)
        offsets["versions"] = b.EndVector()
    _Header.HeaderStart(b)
    for name in SCALAR_FIELDS:
        if fields.get(name) is not None:
            getattr(_Header, "HeaderAdd" + _camel(name))(b, int(fields[name]))
    for name, off in offsets.items():
        getattr(_Header, "HeaderAdd" + _camel(name))(b, off)
    b.Finish(_Header.HeaderEnd(b))  # no file identifier
    table = bytes(b.Output())
    return seal_header(table) if sealed else table


def seal_header(table):
    """The header frame of these FlatBuffers bytes: table + HEADER_MAGIC + u64 little-endian
    XXH3-64 (seed 0) of table + HEADER_MAGIC."""
    body = bytes(table) + HEADER_MAGIC
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body, 0))


def header_intact(frame):
    """True when a header frame ends in the magic and the checksum of the bytes before it."""
    frame = bytes(frame)
    if len(frame) < HEADER_TRAILER_BYTES:
        return False
    body, (digest,) = frame[:-8], struct.unpack("<Q", frame[-8:])
    return body.endswith(HEADER_MAGIC) and xxhash.xxh3_64_intdigest(body, 0) == digest


class Header:
    """A parsed header: one attribute per schema field (defaults where absent).

    frame_lengths and frame_checksums are lists of int, versions a dict {id: version},
    message a str ('' when absent).
    """

    def __init__(self, frame):
        table = _Header.Header.GetRootAs(bytes(frame), 0)
        for name in SCALAR_FIELDS:
            setattr(self, name, getattr(table, _camel(name))())
        self.frame_lengths = [table.FrameLengths(j) for j in range(table.FrameLengthsLength())]
        self.frame_checksums = [table.FrameChecksums(j)
                                for j in range(table.FrameChecksumsLength())]
        self.versions = {}
        for j in range(table.VersionsLength()):
            fv = table.Versions(j)
            self.versions[fv.Id()] = fv.Version()
        raw = table.Message()
        self.message = raw.decode("utf-8", "replace") if raw else ""

    def __repr__(self):
        shown = {k: v for k, v in vars(self).items() if v not in (0, "", [], {})}
        if "type" in shown:
            shown["type"] = enum_name(MsgType, self.type)
        return f"Header({shown})"


def parse_header(frame):
    """Parses a header frame, after its checksum trailer (ProtocolError if it does not match:
    damaged on the way, to be dropped). The Python runtime has no FlatBuffers verifier: beyond
    the checksum it trusts the shard. The table is read from the front of the frame; the
    trailer behind it is never reached."""
    if not header_intact(frame):
        raise ProtocolError("a header frame does not match its checksum trailer")
    return Header(bytes(frame)[:-HEADER_TRAILER_BYTES])


# ---------------------------------------------------------------------------------------------
# Checksums ("Constants": XXH3-64, seed 0, of each payload frame)

def checksum(frame):
    """XXH3-64 with seed 0 of one payload frame's bytes."""
    return xxhash.xxh3_64_intdigest(memoryview(frame).cast("B"), 0)


# ---------------------------------------------------------------------------------------------
# The model manifest ("The manifest of `--model`")

MODEL_PRESETS = {
    "tiny": dict(L=2, H=4, C=64, T=64, V=256),
    "small": dict(L=4, H=4, C=128, T=128, V=256),
    "gpt2-124m": dict(L=12, H=12, C=768, T=1024, V=50257),
    "gpt2-350m": dict(L=24, H=16, C=1024, T=1024, V=50257),
}


def parse_model_spec(spec):
    """A --model value: a preset name, or 'K=v,...' (keys L, H, C, T, V) over tiny's values."""
    if spec in MODEL_PRESETS:
        return dict(MODEL_PRESETS[spec])
    dims = dict(MODEL_PRESETS["tiny"])
    for item in spec.split(","):
        key, value = item.split("=")
        if key.strip() not in dims:
            raise ValueError(f"unknown model key {key!r} in {spec!r}")
        dims[key.strip()] = int(value)
    return dims


def model_manifest(spec):
    """The GPT tensors of a --model spec: a list of (name, shape), in manifest order."""
    d = parse_model_spec(spec)
    c, v, t = d["C"], d["V"], d["T"]
    tensors = [("wte.weight", [v, c]), ("wpe.weight", [t, c])]
    for layer in range(d["L"]):
        p = f"h.{layer}."
        tensors += [
            (p + "ln_1.weight", [c]), (p + "ln_1.bias", [c]),
            (p + "attn.c_attn.weight", [3 * c, c]), (p + "attn.c_attn.bias", [3 * c]),
            (p + "attn.c_proj.weight", [c, c]), (p + "attn.c_proj.bias", [c]),
            (p + "ln_2.weight", [c]), (p + "ln_2.bias", [c]),
            (p + "mlp.c_fc.weight", [4 * c, c]), (p + "mlp.c_fc.bias", [4 * c]),
            (p + "mlp.c_proj.weight", [c, 4 * c]), (p + "mlp.c_proj.bias", [c]),
        ]
    tensors += [("ln_f.weight", [c]), ("ln_f.bias", [c])]
    return tensors


# ---------------------------------------------------------------------------------------------
# Fingerprints ("Fingerprints")

class _Stream:
    """The byte stream a fingerprint hashes: str(s) = u64 length + bytes; raw LE integers."""

    def __init__(self):
        self._h = xxhash.xxh3_64(seed=0)

    def str(self, s):
        data = s.encode()
        self._h.update(struct.pack("<Q", len(data)) + data)

    def u32(self, x):
        self._h.update(struct.pack("<I", x))

    def u64(self, x):
        self._h.update(struct.pack("<Q", x))

    def i64(self, x):
        self._h.update(struct.pack("<q", x))

    def digest(self):
        return self._h.intdigest()


def model_fingerprint(manifest):
    """model_fingerprint of a manifest (list of (name, shape))."""
    s = _Stream()
    s.str("diloco-manifest-v1:fp32")
    for name, shape in manifest:
        s.str(name)
        s.u64(len(shape))
        for dim in shape:
            s.i64(dim)
    return s.digest()


# ---------------------------------------------------------------------------------------------
# The plan ("The plan: which values a fragment holds")

class Plan:
    """Plan::Create(manifest, P fragments, S shards) as the doc describes it.

    Attributes: num_elements (N), pieces[f] (list of (flat_offset, length), by offset),
    shard_of[f], fragment_size(f), fragments_of(shard), model_fingerprint, fingerprint.
    """

    def __init__(self, manifest, fragments, shards):
        self.manifest = manifest
        self.fragments, self.shards = fragments, shards
        sizes = [math.prod(shape) for _, shape in manifest]
        self.num_elements = sum(sizes)
        if fragments < 1 or shards < 1 or fragments > self.num_elements:
            raise ValueError("P > N, or no fragments or shards")
        budget = -(-self.num_elements // fragments)
        pieces, offset = [], 0
        for size in sizes:
            for start in range(0, size, budget):
                pieces.append((offset + start, min(budget, size - start)))
            offset += size
        pieces.sort(key=lambda p: -p[1])  # stable: manifest order among equal lengths
        self.pieces = [[] for _ in range(fragments)]
        filled = [0] * fragments
        for piece in pieces:
            f = min(range(fragments), key=lambda i: (filled[i], i))
            self.pieces[f].append(piece)
            filled[f] += piece[1]
        if min(filled) == 0:
            raise ValueError("a fragment would be empty")
        for f in range(fragments):
            self.pieces[f].sort()
        self.shard_of = [0] * fragments
        load = [0] * shards
        for f in sorted(range(fragments), key=lambda i: -filled[i]):
            s = min(range(shards), key=lambda i: (load[i], i))
            self.shard_of[f] = s
            load[s] += filled[f]
        self.model_fingerprint = model_fingerprint(manifest)
        self.fingerprint = self._fingerprint()

    def fragment_size(self, f):
        return sum(length for _, length in self.pieces[f])

    def fragments_of(self, shard):
        return [f for f in range(self.fragments) if self.shard_of[f] == shard]

    def gather(self, flat, f):
        """The values of fragment f from a flat parameter vector."""
        return np.concatenate([flat[o:o + n] for o, n in self.pieces[f]])

    def _fingerprint(self):
        s = _Stream()
        s.str("diloco-plan-v1")
        s.u64(self.model_fingerprint)
        s.u32(self.fragments)
        s.u32(self.shards)
        for f in range(self.fragments):
            s.u32(self.shard_of[f])
            for offset, length in self.pieces[f]:
                s.u64(offset)
                s.u64(length)
        return s.digest()


def plan_fingerprint(plan):
    return plan.fingerprint


# ---------------------------------------------------------------------------------------------
# Chunked payloads ("Chunked payloads", "Constants") and codecs (kernels.md)

def chunk_elements(block):
    """wire::ChunkElements(block): ceil(2^20 / block) * block."""
    return -(-(1 << 20) // block) * block


def chunk_bounds(n, block):
    """[(start, end)] of each payload frame of an n-element payload (none for n 0)."""
    chunk = chunk_elements(block)
    return [(i, min(i + chunk, n)) for i in range(0, n, chunk)]


def encoded_size(codec, n, block):
    """EncodedSize(codec, n): bytes of n values in one chunk (kernels.md layout table)."""
    nb = -(-n // block)
    return {CODEC_FP32: 4 * n, CODEC_BF16: 2 * n, CODEC_FP8: 4 * nb + n,
            CODEC_INT8: 4 * nb + n, CODEC_INT4: 4 * nb + (n + 1) // 2}[codec]


def encode_fp32(values, block=FRAGMENT_BLOCK):
    """fp32 payload frames of a float32 vector: 4n little-endian bytes per chunk."""
    values = np.ascontiguousarray(values, dtype="<f4")
    return [values[a:b].tobytes() for a, b in chunk_bounds(values.size, block)]


def decode_fp32(frames):
    return np.concatenate([np.frombuffer(f, dtype="<f4") for f in frames])


def _int8_chunk(x, block):
    """One chunk in int8: nb fp32 scales (absmax / 127), then clamp(rne(x / scale)) as int8."""
    n = x.size
    nb = -(-n // block)
    padded = np.zeros(nb * block, dtype=np.float32)
    padded[:n] = x
    blocks = padded.reshape(nb, block)
    absmax = np.abs(blocks).max(axis=1)
    scale = (absmax / np.float32(127)).astype(np.float32)  # an IEEE fp32 division
    safe = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    q = np.rint(blocks / safe[:, None])  # rint: round half to even
    q = np.clip(q, -127, 127)
    q[scale == 0] = 0  # an all-zero block: scale 0, every code 0
    return scale.astype("<f4").tobytes() + q.reshape(-1)[:n].astype(np.int8).tobytes()


def encode_int8(values, block):
    """int8 payload frames of a float32 vector, each chunk encoded on its own (kernels.md)."""
    if not np.all(np.isfinite(values)):
        raise ValueError("Encode refuses NaN/Inf")
    values = np.ascontiguousarray(values, dtype=np.float32)
    return [_int8_chunk(values[a:b], block) for a, b in chunk_bounds(values.size, block)]


def decode_int8(frames, n, block):
    """The values a receiver decodes from int8 frames: deQ = q * scale, in fp32."""
    out = []
    for (a, b), frame in zip(chunk_bounds(n, block), frames):
        m = b - a
        nb = -(-m // block)
        scale = np.frombuffer(frame, dtype="<f4", count=nb)
        q = np.frombuffer(frame, dtype=np.int8, offset=4 * nb, count=m).astype(np.float32)
        out.append(q * np.repeat(scale, block)[:m])
    return np.concatenate(out).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Messages on a connection ("Messages", "Trains", "A session")

class Message:
    """A received message: its parsed header and payload frames (a train already joined)."""

    def __init__(self, header, frames):
        self.header, self.frames = header, frames

    @property
    def type(self):
        return self.header.type

    def __repr__(self):
        return f"Message({self.header!r}, {len(self.frames)} frames)"


class ProtocolError(Exception):
    """The shard sent something the protocol document does not allow."""


class Connection:
    """One DEALER to a shard; sends and receives whole messages.

    Every message a worker sends carries plan_fingerprint, model_fingerprint, worker_id and
    generation: `identity` holds them and send() adds them unless overridden.
    """

    def __init__(self, context, endpoint, identity=None):
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.identity = dict(identity or {})
        self._train = None  # (first header, frames) of a train being joined
        self.heartbeats_seen = 0
        self.trains_cut = 0  # trains from the shard cut short ("Trains": dropped)

    def close(self):
        self.socket.close(0)

    def send(self, frames=(), train=False, **fields):
        """Sends one message of these payload frames, declaring their lengths and checksums.

        train=True sends a payload of several frames as a train: one message per chunk with
        the whole header plus num_chunks and chunk_index, declaring its one frame.
        """
        frames = list(frames)
        merged = dict(self.identity)
        merged.update(fields)
        if train and len(frames) > 1:
            for i, frame in enumerate(frames):
                header = build_header(num_chunks=len(frames), chunk_index=i,
                                      frame_lengths=[len(frame)],
                                      frame_checksums=[checksum(frame)], **merged)
                self.send_raw([header, frame])
            return
        merged.setdefault("frame_lengths", [len(f) for f in frames] if frames else None)
        merged.setdefault("frame_checksums", [checksum(f) for f in frames] if frames else None)
        self.send_raw([build_header(**merged)] + frames)

    def send_raw(self, frames):
        """Sends these exact ZeroMQ frames as one multipart message."""
        self.socket.send_multipart(frames, copy=len(frames) < 2)

    def poll(self, timeout_s):
        return self.socket.poll(int(timeout_s * 1000)) != 0

    def recv(self, timeout_s, skip_heartbeats=True):
        """The next whole message (trains joined), or None if none comes within timeout_s.

        Checks each message's header checksum trailer, declared frame lengths and checksums
        (ProtocolError if wrong).
        Heartbeats the shard sends are skipped unless skip_heartbeats is False.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.poll(left):
                return None
            parts = self.socket.recv_multipart(copy=True)
            header = parse_header(parts[0])
            frames = parts[1:]
            self._check_frames(header, frames)
            if header.num_chunks > 1:
                message = self._join(header, frames)
                if message is None:
                    continue
            else:
                self._cut_train()
                message = Message(header, frames)
            if message.type == MsgType.Heartbeat:
                self.heartbeats_seen += 1
                if skip_heartbeats:
                    continue
            return message

    @staticmethod
    def _check_frames(header, frames):
        if header.protocol_version != PROTOCOL_VERSION:
            raise ProtocolError(f"shard speaks protocol {header.protocol_version}")
        if header.frame_lengths != [len(f) for f in frames]:
            raise ProtocolError(f"frame lengths {header.frame_lengths} vs "
                                f"{[len(f) for f in frames]}")
        if header.frame_checksums != [checksum(f) for f in frames]:
            raise ProtocolError("a payload frame does not match its checksum")

    def _cut_train(self):
        """A train cut short is dropped when the connection's next message arrives."""
        if self._train is not None:
            self._train = None
            self.trains_cut += 1

    def _join(self, header, frames):
        """Adds one train chunk; returns the joined Message after the last one, else None."""
        if len(frames) != 1 or header.chunk_index >= header.num_chunks:
            raise ProtocolError(f"bad train chunk {header!r}")
        if header.chunk_index == 0:
            self._cut_train()
            self._train = (header, [])
        elif self._train is None or header.chunk_index != len(self._train[1]):
            raise ProtocolError(f"train chunk {header.chunk_index} out of order")
        first, collected = self._train
        for name in ("type", "worker_id", "generation", "fragment_id", "seq", "base_version",
                     "version", "tokens", "steps", "codec", "block", "num_elements",
                     "chunk_elements", "num_chunks"):
            if getattr(header, name) != getattr(first, name):
                raise ProtocolError(f"train chunk differs from its first in {name}")
        collected.append(frames[0])
        if len(collected) < first.num_chunks:
            return None
        self._train = None
        first.frame_lengths = [len(f) for f in collected]
        first.frame_checksums = [checksum(f) for f in collected]
        return Message(first, collected)


def fragment_values(message):
    """The fp32 values of a FragmentUpdate, with its chunk layout checked."""
    h = message.header
    if h.codec != CODEC_FP32:
        raise ProtocolError(f"FragmentUpdate codec {h.codec}")
    expected = [encoded_size(CODEC_FP32, b - a, FRAGMENT_BLOCK)
                for a, b in chunk_bounds(h.num_elements, FRAGMENT_BLOCK)]
    if h.chunk_elements != chunk_elements(FRAGMENT_BLOCK) or \
            [len(f) for f in message.frames] != expected:
        raise ProtocolError(f"FragmentUpdate chunk layout {h!r}")
    return decode_fp32(message.frames)
