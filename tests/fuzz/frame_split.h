// The fuzz input format: a multipart message as records [u16 little-endian length][bytes]; a
// length past the end takes what is left. Frames borrow the input in place, so they land at
// every alignment, as frames that libzmq hands out do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "schema/transport.h"

namespace diloco::fuzz {

inline std::vector<zmq::message_t> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<zmq::message_t> frames;
  size_t pos = 0;
  while (pos + 2 <= size && frames.size() < 8192) {
    size_t len = data[pos] | (size_t{data[pos + 1]} << 8);
    pos += 2;
    len = std::min(len, size - pos);
    frames.push_back(wire::BorrowedFrame(data + pos, len));
    pos += len;
  }
  return frames;
}

inline std::string JoinFrames(const std::vector<zmq::message_t>& frames) {
  std::string out;
  for (const auto& f : frames) {
    out.push_back(static_cast<char>(f.size() & 0xff));
    out.push_back(static_cast<char>((f.size() >> 8) & 0xff));
    out.append(f.data<char>(), f.size());
  }
  return out;
}

// Reads every field of a parsed message, so that a header the verifier let through is also
// read through (the sanitizers then check those reads).
inline uint64_t Touch(const wire::Message& m) {
  const wire::Header& h = m.header();
  uint64_t x = h.protocol_version() + h.plan_fingerprint() + h.model_fingerprint() + h.worker_id() +
               h.generation() + h.seq() + h.shard() + h.incarnation() + h.fragment_id() +
               h.base_version() + h.version() + h.round() + h.tokens() + h.steps() + h.codec() +
               h.block() + h.num_elements() + h.chunk_elements() + h.step_time_us() +
               h.fleet_step_time_us();
  x += std::string(wire::MsgTypeName(m.type())).size();
  x += std::string(wire::EnumNameAckStatus(h.ack())).size();
  x += std::string(wire::EnumNameErrorCode(h.error_code())).size();
  if (h.message()) x += h.message()->str().size();
  if (h.versions())
    for (const auto* v : *h.versions()) x += v->id() + v->version();
  for (size_t i = 0; i < m.num_payloads(); ++i) {
    auto p = m.payload(i);
    if (!p.empty()) x += p[0] + p[p.size() - 1];
  }
  return x;
}

}  // namespace diloco::fuzz
