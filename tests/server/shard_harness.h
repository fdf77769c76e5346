// Drives a transport-free Shard with hand-built messages and a fake clock.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "schema/transport.h"
#include "server/shard.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco::server::testing {

inline ShardOptions TinyOptions(uint32_t fragments = 2, uint32_t shards = 1) {
  ShardOptions o;
  o.manifest = GptManifest(GptConfig{16, 4, 1, 1, 4}).value();  // a few hundred parameters
  o.num_fragments = fragments;
  o.num_shards = shards;
  o.round.quorum = 1;
  o.round.grace_cap = absl::Seconds(5);
  o.checkpoint_thread = false;  // synchronous checkpoints; shard_writer_test runs the thread
  return o;
}

class ShardHarness {
 public:
  explicit ShardHarness(ShardOptions o) : opts_(std::move(o)) { Start(); }

  void Start() {
    auto s = Shard::Create(opts_, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    shard_ = std::move(*s);
  }
  void Stop() { shard_.reset(); }

  Shard& shard() { return *shard_; }
  FakeClock& clock() { return clock_; }
  const Fragment& fragment(uint32_t id) const { return shard_->plan().fragment(id); }

  wire::HeaderFields Base(wire::MsgType t, uint32_t worker, uint64_t generation = 1) const {
    wire::HeaderFields h;
    h.type = t;
    h.plan_fingerprint = shard_->plan_fingerprint();
    h.model_fingerprint = opts_.manifest.fingerprint();
    h.worker_id = worker;
    h.generation = generation;
    return h;
  }

  static std::vector<zmq::message_t> Frames(const wire::HeaderFields& h,
                                            const std::vector<std::vector<uint8_t>>& payloads) {
    std::vector<zmq::message_t> p;
    for (const auto& b : payloads) p.emplace_back(b.data(), b.size());
    std::vector<zmq::message_t> f;
    f.push_back(wire::BuildHeader(h, p));
    for (auto& m : p) f.push_back(std::move(m));
    return f;
  }

  std::vector<Outgoing> Send(const std::string& rid, const wire::HeaderFields& h,
                             const std::vector<std::vector<uint8_t>>& payloads = {}) {
    std::vector<Outgoing> out;
    shard_->Handle(rid, Frames(h, payloads), &out);
    return out;
  }
  std::vector<Outgoing> SendRaw(const std::string& rid, std::vector<zmq::message_t> frames) {
    std::vector<Outgoing> out;
    shard_->Handle(rid, std::move(frames), &out);
    return out;
  }
  std::vector<Outgoing> Tick() {
    std::vector<Outgoing> out;
    shard_->Tick(&out);
    return out;
  }

  std::vector<Outgoing> Hello(const std::string& rid, uint32_t worker, uint64_t gen = 1) {
    return Send(rid, Base(wire::MsgType::Hello, worker, gen));
  }

  // Encodes `values` in chunks as the wire expects.
  static std::vector<std::vector<uint8_t>> Encode(kernels::Codec c,
                                                  const std::vector<float>& values) {
    std::vector<std::vector<uint8_t>> out;
    const uint64_t chunk = wire::ChunkElements(c.block);
    for (uint64_t off = 0; off < values.size(); off += chunk) {
      const uint64_t n = std::min<uint64_t>(chunk, values.size() - off);
      std::vector<uint8_t> b(kernels::EncodedSize(c, n));
      EXPECT_TRUE(kernels::Encode(c, std::span<const float>(values.data() + off, n), b).ok());
      out.push_back(std::move(b));
    }
    return out;
  }

  std::vector<Outgoing> Init(const std::string& rid, uint32_t worker, uint32_t frag,
                             const std::vector<float>& values) {
    auto h = Base(wire::MsgType::InitFragment, worker);
    h.fragment_id = frag;
    wire::SetPayloadLayout(h, wire::kFragmentCodec, values.size());
    return Send(rid, h, Encode(wire::kFragmentCodec, values));
  }

  // The header of worker's push `seq` of `numel` values of fragment `frag` on version `base`.
  wire::HeaderFields PushFields(uint32_t worker, uint32_t frag, uint64_t seq, uint64_t base,
                                uint64_t numel, uint64_t tokens = 100, uint32_t steps = 10,
                                kernels::Codec c = wire::kFragmentCodec) const {
    auto h = Base(wire::MsgType::Push, worker);
    h.fragment_id = frag;
    h.seq = seq;
    h.base_version = base;
    h.tokens = tokens;
    h.steps = steps;
    wire::SetPayloadLayout(h, c, numel);
    return h;
  }

  std::vector<Outgoing> Push(const std::string& rid, uint32_t worker, uint32_t frag, uint64_t seq,
                             uint64_t base, const std::vector<float>& delta, uint64_t tokens = 100,
                             uint32_t steps = 10, kernels::Codec c = wire::kFragmentCodec) {
    return Send(rid, PushFields(worker, frag, seq, base, delta.size(), tokens, steps, c),
                Encode(c, delta));
  }

 private:
  ShardOptions opts_;
  FakeClock clock_;
  std::unique_ptr<Shard> shard_;
};

// The single reply of `type` in `out` (fails the test when there is not exactly one). The
// pointer points into `out`: keep a named vector for it when the pointer outlives the statement.
inline const Outgoing* Only(const std::vector<Outgoing>& out, wire::MsgType type) {
  const Outgoing* found = nullptr;
  int n = 0;
  for (const auto& o : out)
    if (o.header.type == type) {
      found = &o;
      ++n;
    }
  EXPECT_EQ(n, 1) << "replies of type " << wire::MsgTypeName(type);
  return found;
}

}  // namespace diloco::server::testing
