// fuzz_seed_gen DIR: writes the seed corpus (valid messages of every type, and a few refused
// ones) in the frame_split.h format. The checked-in corpus/message was made with it; rerun it
// when the protocol version changes (every header frame ends in the version's trailer).
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/codec.h"
#include "kernels/topk.h"
#include "tests/fuzz/frame_split.h"

namespace diloco::fuzz {
namespace {

std::vector<zmq::message_t> Message(const wire::HeaderFields& h,
                                    const std::vector<std::string>& payloads) {
  std::vector<zmq::message_t> p;
  for (const auto& s : payloads) p.emplace_back(s.data(), s.size());
  std::vector<zmq::message_t> f;
  f.push_back(wire::BuildHeader(h, p));
  for (auto& m : p) f.push_back(std::move(m));
  return f;
}

// The fuzzer's first find (before protocol version 3): a header frame whose uint64 vectors sit
// 4 bytes off 8-byte alignment, with a 3-byte payload. Kept as its FlatBuffers bytes and
// sealed with the current trailer, so that it still reaches the check it found.
const char kMisalignedVectorHeader[] =
    "\x34\x00\x00\x00\x00\x00\x2e\x00\x30\x00\x2e\x00\x2d\x00\x24\x00"
    "\x1c\x00\x18\x00\x0c\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x08\x00\x04\x00\x2e\x00\x00\x00\x2c\x00\x00\x00\x34\x00\x00\x00"
    "\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00"
    "\x10\x32\x54\x76\x98\xba\xdc\xfe\xef\xcd\xab\x89\x67\x45\x23\x01"
    "\x00\x07\x01\x00\x01\x00\x00\x00\x90\x98\xa8\x53\x6f\xa9\x97\x64"
    "\x01\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00";

// A Hello as a peer of protocol version 2 sent it: FlatBuffers bytes, no trailer.
zmq::message_t Version2Hello(const wire::HeaderFields& base) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::HeaderBuilder b(fbb);
  b.add_protocol_version(2);
  b.add_type(wire::MsgType::Hello);
  b.add_plan_fingerprint(base.plan_fingerprint);
  b.add_model_fingerprint(base.model_fingerprint);
  b.add_worker_id(base.worker_id);
  b.add_generation(base.generation);
  fbb.Finish(b.Finish());
  return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
}

// A top-k push payload of n values: deterministic values, encoded by the codec itself.
std::string TopKPayload(kernels::Codec c, size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 37) % 101) - 50.0f;
  std::string out(kernels::EncodedSize(c, n), '\0');
  (void)kernels::Encode(c, x, std::span(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  return out;
}

// Sets the w-bit field j of an LSB-first bit stream.
void SetField(char* p, size_t j, uint32_t w, uint32_t v) {
  for (uint32_t i = 0; i < w; ++i) {
    const size_t bit = j * w + i;
    const auto mask = static_cast<char>(1u << (bit % 8));
    p[bit / 8] = static_cast<char>(((v >> i) & 1u) ? (p[bit / 8] | mask) : (p[bit / 8] & ~mask));
  }
}

}  // namespace
}  // namespace diloco::fuzz

int main(int argc, char** argv) {
  using namespace diloco;
  using wire::MsgType;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seed_gen DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto write = [&](const std::string& name, const std::vector<zmq::message_t>& frames) {
    std::ofstream(dir + "/" + name, std::ios::binary) << fuzz::JoinFrames(frames);
  };
  wire::HeaderFields base;
  base.plan_fingerprint = 0x0123456789abcdef;
  base.model_fingerprint = 0xfedcba9876543210;
  base.worker_id = 3;
  base.generation = 7;

  auto h = base;
  h.type = MsgType::Hello;
  write("valid_hello", fuzz::Message(h, {}));
  h.type = MsgType::Welcome;
  h.versions = {wire::FragmentVersion(0, 5), wire::FragmentVersion(2, 9)};
  h.fleet_step_time_us = 1200;
  write("valid_welcome", fuzz::Message(h, {}));
  h = base;
  h.type = MsgType::Push;
  h.fragment_id = 1;
  h.seq = 4;
  h.base_version = 2;
  h.tokens = 4096;
  h.steps = 10;
  h.codec = 3;
  h.block = 64;
  h.num_elements = 96;
  h.chunk_elements = 64;
  write("valid_push", fuzz::Message(h, {std::string(68, 'a'), std::string(36, 'b')}));
  const auto push = h;
  h.type = MsgType::PushAck;
  h.ack = wire::AckStatus::Stale;
  h.message = "base version 2, fragment is at 30: pull and push again";
  write("valid_pushack", fuzz::Message(h, {}));
  h = base;
  h.type = MsgType::Error;
  h.error_code = wire::ErrorCode::BadChecksum;
  h.message = "frame 0 checksum mismatch";
  write("valid_error", fuzz::Message(h, {}));
  h = base;
  h.type = MsgType::FragmentUpdate;
  h.version = 12;
  h.codec = 0;
  h.block = 256;
  h.num_elements = 8;
  write("valid_update", fuzz::Message(h, {std::string(32, '\x3f')}));
  // Two quantized updates (int8, one block of 8 values each: a 4-byte scale and 8 codes).
  h.codec = 3;
  h.base_version = 10;
  h.values_checksum = 0x0123456789abcdefull;
  write("valid_update_chain", fuzz::Message(h, {std::string(12, '\x01'), std::string(12, '\x02')}));
  h = base;
  h.type = MsgType::Stats;
  write("valid_stats", fuzz::Message(h, {}));

  // A push as a train of three chunk messages, cut apart by empty frames (train_feed.h). Not a
  // single message, so named neither valid_ nor bad_; the replay test joins it.
  h = push;
  h.seq = 9;
  h.num_elements = 192;  // three chunks of 64
  h.num_chunks = 3;
  std::vector<zmq::message_t> train;
  for (uint32_t k = 0; k < 3; ++k) {
    h.chunk_index = k;
    if (k > 0) train.emplace_back();
    for (auto& f : fuzz::Message(h, {std::string(68, static_cast<char>('x' + k))}))
      train.push_back(std::move(f));
  }
  write("train_push", train);

  // Top-k pushes (96 values: a block of 64 and one of 32): topk-packed with packed indices (k 4)
  // and bitmap (k 20), topk with Elias-Fano ones (k 8), and payloads that parse but fail the
  // payload check (payload_bad_*: the replay test names the cause of each): a repeated packed
  // index, one past a short block, a bitmap one mark over, a negative magnitude, an Elias-Fano
  // high part with no mark.
  for (const auto& [name, kind, k] : {std::tuple{"packed", kernels::CodecKind::kTopKPacked, 4u},
                                      std::tuple{"bitmap", kernels::CodecKind::kTopKPacked, 20u},
                                      std::tuple{"eliasfano", kernels::CodecKind::kTopK, 8u}}) {
    const kernels::Codec c{kind, 64, k};
    h = push;
    h.codec = static_cast<uint8_t>(c.kind);
    h.topk = c.k;
    h.chunk_elements = wire::ChunkElements(c.block);
    write(std::string("valid_push_topk_") + name, fuzz::Message(h, {fuzz::TopKPayload(c, 96)}));
  }
  {
    const kernels::Codec c{kernels::CodecKind::kTopKPacked, 64, 4};
    h = push;
    h.codec = static_cast<uint8_t>(c.kind);
    h.topk = c.k;
    h.chunk_elements = wire::ChunkElements(c.block);
    const std::string ok = fuzz::TopKPayload(c, 96);
    const uint32_t w = kernels::TopKIndexBits(64);
    std::string p = ok;
    char* rec0 = p.data() + kernels::internal::TopKRecordOffset(c, 96, 0);
    fuzz::SetField(rec0, 1, w, 0);  // index 0 twice (or out of order)
    fuzz::SetField(rec0, 0, w, 0);
    write("payload_bad_topk_repeated", fuzz::Message(h, {p}));
    p = ok;
    char* rec1 = p.data() + kernels::internal::TopKRecordOffset(c, 96, 1);
    fuzz::SetField(rec1, kernels::TopKCount(c, 32) - 1, w, 40);  // block 1 holds 32 values
    write("payload_bad_topk_range", fuzz::Message(h, {p}));
    p = ok;
    p[3] = static_cast<char>(0x80 | p[3]);  // block 0's lo: sign bit
    write("payload_bad_topk_scale", fuzz::Message(h, {p}));
    const kernels::Codec b{kernels::CodecKind::kTopKPacked, 64, 20};
    h.topk = b.k;
    p = fuzz::TopKPayload(b, 96);
    char* bitmap = p.data() + kernels::internal::TopKRecordOffset(b, 96, 0);
    for (int i = 0; i < 8; ++i) bitmap[i] = static_cast<char>(0xFF);  // 64 marks, not 20
    write("payload_bad_topk_bitmap", fuzz::Message(h, {p}));
    // Elias-Fano, k 8 of 64 (L = 3): 24 low bits, then the 15 high bits, all cleared.
    const kernels::Codec e{kernels::CodecKind::kTopK, 64, 8};
    h.codec = static_cast<uint8_t>(e.kind);
    h.topk = e.k;
    p = fuzz::TopKPayload(e, 96);
    char* high = p.data() + kernels::internal::TopKRecordOffset(e, 96, 0) + 3;
    high[0] = 0;
    high[1] = static_cast<char>(high[1] & 0x80);
    write("payload_bad_topk_eliasfano", fuzz::Message(h, {p}));
  }

  // Refused: a header with its root offset cut (resealed: the verifier refuses it, not the
  // header checksum), a payload frame one byte short, a header with one bit flipped, a peer of
  // an older version, and the misaligned vectors.
  auto bad = fuzz::Message(base, {"abcd"});
  bad[0].data<char>()[0] = 0;
  wire::ResealHeaderFrame(bad[0]);
  write("bad_root_offset", bad);
  h = base;
  h.type = MsgType::Pull;
  auto short_frame = fuzz::Message(h, {"abcd"});
  short_frame[1] = zmq::message_t("abc", 3);
  write("bad_length", short_frame);
  // A push whose header lost one bit of its seq on the way: refused by the header checksum.
  auto flipped = fuzz::Message(push, {std::string(68, 'a'), std::string(36, 'b')});
  const auto* table =
      reinterpret_cast<const flatbuffers::Table*>(wire::GetHeader(flipped[0].data<uint8_t>()));
  const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(
      table))[table->GetOptionalFieldOffset(wire::Header::VT_SEQ)] ^= 0x02;
  write("bad_header_flip", flipped);
  std::vector<zmq::message_t> old_peer;
  old_peer.push_back(fuzz::Version2Hello(base));
  write("bad_old_version", old_peer);
  std::vector<zmq::message_t> misaligned;
  misaligned.push_back(
      wire::SealHeader(fuzz::kMisalignedVectorHeader, sizeof(fuzz::kMisalignedVectorHeader) - 1));
  misaligned.emplace_back("abc", 3);
  write("bad_misaligned_vector", misaligned);
  return 0;
}
