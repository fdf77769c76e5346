// A SessionTransport that records what a ShardSession sends instead of sending it: tests of
// the session (and of the training thread beside it) read the messages back by type and answer
// them by hand.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/manifest.h"
#include "common/plan.h"
#include "schema/transport.h"
#include "worker/shard_session.h"

namespace diloco::worker {

struct Sent {
  bool control = false;
  wire::HeaderFields h;
  std::shared_ptr<const wire::Bytes> payload;
};

class RecordingTransport final : public SessionTransport {
 public:
  void Reconnect(bool control) override {
    ++reconnects;
    reconnected_control = control;
  }
  bool Send(bool control, const wire::HeaderFields& h, std::shared_ptr<const wire::Bytes> payload,
            kernels::Codec, uint64_t, std::span<const uint64_t>) override {
    sent.push_back({control, h, std::move(payload)});
    return true;
  }
  std::vector<std::string> TakeRefusals() override { return std::exchange(refusals, {}); }
  bool TakeDisconnected() override { return std::exchange(disconnected, false); }

  // The messages of `type` sent since the last call for it.
  std::vector<Sent> Take(wire::MsgType type) {
    std::vector<Sent> out, rest;
    for (auto& s : sent) (s.h.type == type ? out : rest).push_back(std::move(s));
    sent = std::move(rest);
    return out;
  }

  std::vector<Sent> sent;
  std::vector<std::string> refusals;
  bool disconnected = false;  // the data connection was lost (until the session takes it)
  int reconnects = 0;
  bool reconnected_control = false;
};

// A header as the shard of `plan` and `manifest` addresses it to the worker `who`.
inline wire::HeaderFields ShardHeader(wire::MsgType t, const Plan& plan, const Manifest& manifest,
                                      const WorkerIdentity& who) {
  wire::HeaderFields h;
  h.type = t;
  h.plan_fingerprint = plan.fingerprint();
  h.model_fingerprint = manifest.fingerprint();
  h.worker_id = who.worker_id;
  h.generation = who.generation;
  return h;
}

// The message a shard would send: header `h` and, when given, `payload` as fp32 chunks.
inline absl::StatusOr<wire::Message> BuildMessage(
    const wire::HeaderFields& h, std::shared_ptr<const wire::Bytes> payload = nullptr) {
  std::vector<zmq::message_t> frames;
  if (payload) frames = wire::PayloadFrames(payload, wire::kFragmentCodec, h.num_elements);
  std::vector<zmq::message_t> all;
  all.push_back(wire::BuildHeader(h, frames));
  for (auto& f : frames) all.push_back(std::move(f));
  return wire::ParseMessage(std::move(all));
}

}  // namespace diloco::worker
