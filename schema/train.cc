#include "schema/train.h"

#include "absl/strings/str_cat.h"

namespace diloco::wire {
namespace {

// Every field that describes the payload as a whole is the same in each chunk of a train.
bool SamePayload(const Header& a, const Header& b) {
  return a.type() == b.type() && a.plan_fingerprint() == b.plan_fingerprint() &&
         a.model_fingerprint() == b.model_fingerprint() && a.worker_id() == b.worker_id() &&
         a.generation() == b.generation() && a.seq() == b.seq() && a.shard() == b.shard() &&
         a.incarnation() == b.incarnation() && a.fragment_id() == b.fragment_id() &&
         a.base_version() == b.base_version() && a.version() == b.version() &&
         a.round() == b.round() && a.tokens() == b.tokens() && a.steps() == b.steps() &&
         a.codec() == b.codec() && a.block() == b.block() && a.topk() == b.topk() &&
         a.num_elements() == b.num_elements() && a.chunk_elements() == b.chunk_elements() &&
         a.ack() == b.ack() && a.num_chunks() == b.num_chunks() &&
         a.values_checksum() == b.values_checksum();
}

}  // namespace

absl::StatusOr<std::optional<Message>> TrainAssembler::Add(const std::string& connection, Message m,
                                                           absl::Time now) {
  auto it = partial_.find(connection);
  if (!m.is_chunk()) {
    if (it != partial_.end()) {  // nothing interleaves a train: this one was cut short
      ++trains_cut_;
      partial_.erase(it);
    }
    return std::optional<Message>(std::move(m));
  }
  const Header& h = m.header();
  if (h.chunk_index() == 0) {
    if (it != partial_.end()) {  // the previous train was cut short
      ++trains_cut_;
      partial_.erase(it);
    }
    Partial p{std::move(m), {}, now};
    p.frames.reserve(p.first.header().num_chunks() - 1);
    partial_.emplace(connection, std::move(p));
    return std::optional<Message>();
  }
  if (it == partial_.end())
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("chunk ", h.chunk_index(), " of a train that never started"));
  Partial& p = it->second;
  const uint32_t expected = static_cast<uint32_t>(p.frames.size()) + 1;
  if (h.chunk_index() != expected || !SamePayload(p.first.header(), h)) {
    ++trains_cut_;
    partial_.erase(it);
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("chunk ", h.chunk_index(), " does not continue its train (",
                                  h.chunk_index() != expected ? "expected chunk " : "fields differ",
                                  h.chunk_index() != expected ? absl::StrCat(expected) : "", ")"));
  }
  p.frames.push_back(std::move(m.frames_[1]));
  p.last = now;
  if (p.frames.size() + 1 < p.first.header().num_chunks()) return std::optional<Message>();
  Message joined = std::move(p.first);
  for (auto& f : p.frames) joined.frames_.push_back(std::move(f));
  partial_.erase(it);
  // Moving frames between vectors may move a small frame's inline storage: point again.
  joined.header_ = GetHeader(joined.frames_[0].data());
  joined.joined_ = true;
  return std::optional<Message>(std::move(joined));
}

void TrainAssembler::Drop(const std::string& connection) {
  if (partial_.erase(connection) > 0) ++trains_cut_;
}

size_t TrainAssembler::DropIdleSince(absl::Time cutoff) {
  const size_t n =
      absl::erase_if(partial_, [&](const auto& kv) { return kv.second.last < cutoff; });
  trains_cut_ += n;
  return n;
}

uint64_t TrainAssembler::partial_bytes() const {
  uint64_t n = 0;
  for (const auto& [_, p] : partial_) {
    n += p.first.payload_bytes();
    for (const auto& f : p.frames) n += f.size();
  }
  return n;
}

}  // namespace diloco::wire
