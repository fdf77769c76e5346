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

// The second reading of an input, for payload trains: its frames cut at empty frames into a
// sequence of messages (an empty frame is never a valid header, so seeds of one message read the
// same both ways).
inline std::vector<std::vector<zmq::message_t>> SplitMessages(const uint8_t* data, size_t size) {
  std::vector<std::vector<zmq::message_t>> messages(1);
  for (auto& f : SplitFrames(data, size)) {
    if (f.size() == 0) {
      if (!messages.back().empty()) messages.emplace_back();
      continue;
    }
    messages.back().push_back(std::move(f));
  }
  if (messages.back().empty()) messages.pop_back();
  return messages;
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
               h.block() + h.topk() + h.num_elements() + h.chunk_elements() + h.step_time_us() +
               h.fleet_step_time_us() + h.credit_bytes() + h.num_chunks() + h.chunk_index() +
               static_cast<uint64_t>(h.channel());
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
