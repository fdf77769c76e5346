#include "tests/integration/synthetic_pusher.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/model_source.h"

namespace diloco::testing {

using wire::AckStatus;
using wire::MsgType;

namespace {
constexpr absl::Duration kAnswerTimeout = absl::Seconds(120);
}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticPusher>> SyntheticPusher::Create(
    std::vector<std::string> endpoints, const std::string& model, uint32_t fragments,
    kernels::Codec codec, uint32_t worker_id) {
  auto source = LoadModelSource(model);
  if (!source.ok()) return source.status();
  const Manifest* manifest = &source->manifest;
  auto plan = Plan::Create(*manifest, fragments, static_cast<uint32_t>(endpoints.size()));
  if (!plan.ok()) return plan.status();
  std::unique_ptr<SyntheticPusher> p(new SyntheticPusher());
  p->plan_ = std::make_unique<Plan>(*std::move(plan));
  p->model_fingerprint_ = manifest->fingerprint();
  p->codec_ = codec;
  p->worker_id_ = worker_id;
  p->seq_.assign(fragments, 0);
  p->base_.assign(fragments, 1);
  const uint64_t chunk = wire::ChunkElements(codec.block);
  for (const auto& f : p->plan_->fragments()) {
    std::mt19937 rng(f.id);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    std::vector<float> v(std::min<uint64_t>(chunk, f.numel));
    for (auto& x : v) x = d(rng);
    auto b = std::make_shared<wire::Bytes>();
    for (uint64_t off = 0; off < f.numel; off += chunk) {  // the same delta in every chunk
      const uint64_t n = std::min<uint64_t>(chunk, f.numel - off);
      const size_t at = b->size();
      b->resize(at + kernels::EncodedSize(codec, n));
      if (auto s = kernels::Encode(codec, std::span<const float>(v.data(), n),
                                   std::span<uint8_t>(b->data() + at, b->size() - at));
          !s.ok())
        return s;
    }
    p->encoded_bytes_ += b->size();
    p->encoded_.push_back(std::move(b));
  }
  if (auto s = p->Connect(std::move(endpoints)); !s.ok()) return s;
  return p;
}

absl::Status SyntheticPusher::Connect(std::vector<std::string> endpoints) {
  socks_.clear();
  trains_.clear();
  trains_.resize(endpoints.size());
  for (uint32_t s = 0; s < endpoints.size(); ++s) {
    socks_.push_back(std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer));
    wire::ConfigureSocket(*socks_.back());
    socks_.back()->connect(endpoints[s]);
    const auto h = Header(MsgType::Hello, 0);
    if (auto st = wire::Send(*socks_.back(), h, {}, nullptr, false); !st.ok()) return st;
    auto m = Await(s, h, absl::Seconds(30));
    if (!m.ok()) return m.status();
  }
  return absl::OkStatus();
}

wire::HeaderFields SyntheticPusher::Header(MsgType t, uint32_t f) const {
  wire::HeaderFields h;
  h.type = t;
  h.plan_fingerprint = plan_->fingerprint();
  h.model_fingerprint = model_fingerprint_;
  h.worker_id = worker_id_;
  h.generation = 1;
  h.fragment_id = f;
  return h;
}

// The answer to `sent`: Welcome to Hello, PushAck to InitFragment, an Applied FragmentUpdate
// to Push (a Queued PushAck before it is skipped), a FragmentUpdate to Pull.
absl::StatusOr<wire::Message> SyntheticPusher::Await(uint32_t shard, const wire::HeaderFields& sent,
                                                     absl::Duration timeout) {
  zmq::socket_t& s = *socks_[shard];
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    auto r = wire::TryRecvMessage(s, trains_[shard]);
    if (!r.ok()) return r.status();
    if (!r->has_value()) continue;
    wire::Message m = *std::move(*r);
    const auto& h = m.header();
    const std::string what = absl::StrCat(MsgTypeName(m.type()), " (fragment ", h.fragment_id(),
                                          ", seq ", h.seq(), ", ack ", static_cast<int>(h.ack()),
                                          ") ", h.message() ? h.message()->str() : "");
    if (m.type() == MsgType::Error)
      return absl::InternalError(
          absl::StrCat("shard ", shard, " refused ", MsgTypeName(sent.type), ": ", what));
    switch (sent.type) {
      case MsgType::Hello:
        if (m.type() == MsgType::Welcome) return m;
        break;
      case MsgType::InitFragment:
        if (m.type() == MsgType::PushAck && h.fragment_id() == sent.fragment_id) {
          if (h.ack() != AckStatus::Initialized && h.ack() != AckStatus::AlreadyInitialized)
            return absl::InternalError(absl::StrCat("InitFragment answered ", what));
          return m;
        }
        break;
      case MsgType::Push:
        if (h.fragment_id() != sent.fragment_id || h.seq() != sent.seq) break;
        if (m.type() == MsgType::FragmentUpdate && h.ack() == AckStatus::Applied) return m;
        if (m.type() == MsgType::PushAck && h.ack() == AckStatus::Queued) break;
        return absl::InternalError(absl::StrCat("push answered ", what));
      case MsgType::Pull:
        if (m.type() == MsgType::FragmentUpdate && h.fragment_id() == sent.fragment_id) return m;
        break;
      default:
        break;
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shard ", shard, " did not answer ", MsgTypeName(sent.type), " of fragment ",
                   sent.fragment_id, " within ", absl::FormatDuration(timeout)));
}

absl::Status SyntheticPusher::InitAll(float value) {
  const kernels::Codec fp32{kernels::CodecKind::kFp32, 256};
  for (const auto& f : plan_->fragments()) {
    std::vector<float> v(f.numel, value);
    auto b = std::make_shared<wire::Bytes>(f.numel * 4);
    std::memcpy(b->data(), v.data(), b->size());
    auto h = Header(MsgType::InitFragment, f.id);
    wire::SetPayloadLayout(h, fp32, f.numel);
    if (auto s =
            wire::Send(*socks_[f.shard], h, wire::PayloadFrames(b, fp32, f.numel), nullptr, false);
        !s.ok())
      return s;
    auto m = Await(f.shard, h, kAnswerTimeout);
    if (!m.ok()) return m.status();
    base_[f.id] = m->header().version();
  }
  return absl::OkStatus();
}

absl::Status SyntheticPusher::Push(uint32_t f) {
  const Fragment& spec = plan_->fragment(f);
  auto h = Header(MsgType::Push, f);
  h.seq = ++seq_[f];
  h.base_version = base_[f];
  h.tokens = 1000;
  h.steps = 10;
  wire::SetPayloadLayout(h, codec_, spec.numel);
  if (auto s = wire::Send(*socks_[spec.shard], h,
                          wire::PayloadFrames(encoded_[f], codec_, spec.numel), nullptr, false);
      !s.ok())
    return s;
  auto m = Await(spec.shard, h, kAnswerTimeout);
  if (!m.ok()) return m.status();
  base_[f] = m->header().version();
  last_[f] = {m->header().version(), ValuesChecksum(*m)};
  ++applied_;
  return absl::OkStatus();
}

absl::Status SyntheticPusher::PushAll() {
  for (const auto& f : plan_->fragments())
    if (auto s = Push(f.id); !s.ok()) return s;
  return absl::OkStatus();
}

absl::StatusOr<SyntheticPusher::Seen> SyntheticPusher::Pull(uint32_t f) {
  auto h = Header(MsgType::Pull, f);
  if (auto s = wire::Send(*socks_[plan_->fragment(f).shard], h, {}, nullptr, false); !s.ok())
    return s;
  auto m = Await(plan_->fragment(f).shard, h, kAnswerTimeout);
  if (!m.ok()) return m.status();
  return Seen{m->header().version(), ValuesChecksum(*m)};
}

uint64_t SyntheticPusher::ValuesChecksum(const wire::Message& m) {
  // A chain of quantized updates names the values it rebuilds (docs/protocol.md).
  if (m.header().codec() != static_cast<uint8_t>(kernels::CodecKind::kFp32))
    return m.header().values_checksum();
  Hasher values;  // XXH3-64 of the fp32 values in order: the same definition
  for (size_t i = 0; i < m.num_payloads(); ++i)
    values.Update(m.payload(i).data(), m.payload(i).size());
  return values.Digest();
}

uint64_t SyntheticPusher::params() const {
  uint64_t n = 0;
  for (const auto& f : plan_->fragments()) n += f.numel;
  return n;
}

double SyntheticPusher::push_bytes_per_param() const {
  return static_cast<double>(encoded_bytes_) / params();
}

}  // namespace diloco::testing
