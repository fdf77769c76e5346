// fuzz_seed_gen DIR: writes the seed corpus (valid messages of every type, and a few refused
// ones) in the frame_split.h format. The checked-in corpus/message was made with it.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

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

  // Refused: a payload frame one byte short, and a header with its root offset cut.
  auto bad = fuzz::Message(base, {"abcd"});
  bad[0].data<char>()[0] = 0;
  write("bad_root_offset", bad);
  h = base;
  h.type = MsgType::Pull;
  auto short_frame = fuzz::Message(h, {"abcd"});
  short_frame[1] = zmq::message_t("abc", 3);
  write("bad_length", short_frame);
  return 0;
}
