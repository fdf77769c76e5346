#include "schema/train.h"

#include <bit>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace diloco::wire {
namespace {

static_assert(std::endian::native == std::endian::little, "TrainChecksum hashes u64s in place");

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
         a.values_checksum() == b.values_checksum() && a.train_checksum() == b.train_checksum() &&
         a.keyframe_version() == b.keyframe_version() && a.chain_updates() == b.chain_updates();
}

// A validated chunk's checksum (ParseMessage checked that it carries one frame and its sum).
uint64_t ChunkSum(const Message& m) { return m.header().frame_checksums()->Get(0); }

}  // namespace

uint64_t TrainChecksum(std::span<const uint64_t> chunk_checksums) {
  return Checksum64(chunk_checksums.data(), chunk_checksums.size_bytes());
}

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
    kept_.Erase(KeptTrains::Id::Of(h));  // the push goes whole again: its kept chunks are moot
    const uint64_t sum = ChunkSum(m);
    PartialTrain p{std::move(m), {}, {sum}, now};
    p.frames.reserve(p.first.header().num_chunks() - 1);
    p.sums.reserve(p.first.header().num_chunks());
    partial_.emplace(connection, std::move(p));
    return std::optional<Message>();
  }
  if (it == partial_.end()) {
    // A push resumed on a new connection: the chunk its kept train lacks next, of one payload.
    const KeptTrains::Id id = KeptTrains::Id::Of(h);
    const PartialTrain* kept = h.train_checksum() != 0 ? kept_.Find(id) : nullptr;
    if (kept && h.chunk_index() == kept->chunks() && SamePayload(kept->first.header(), h)) {
      it = partial_.emplace(connection, *kept_.Take(id)).first;
      ++trains_resumed_;
    } else if (h.train_checksum() != 0) {
      return WireError(
          ErrorCode::TrainNotHeld,
          kept ? absl::StrCat("chunk ", h.chunk_index(), " does not continue the kept train (",
                              kept->chunks(), " chunks held",
                              h.chunk_index() == kept->chunks() ? ", another payload" : "",
                              "): send the push whole")
               : absl::StrCat("chunk ", h.chunk_index(),
                              " resumes a train not held here: send the push whole"));
    } else {
      return WireError(ErrorCode::Malformed,
                       absl::StrCat("chunk ", h.chunk_index(), " of a train that never started"));
    }
  }
  PartialTrain& p = it->second;
  const uint32_t expected = p.chunks();
  if (h.chunk_index() != expected || !SamePayload(p.first.header(), h)) {
    ++trains_cut_;
    partial_.erase(it);
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("chunk ", h.chunk_index(), " does not continue its train (",
                                  h.chunk_index() != expected ? "expected chunk " : "fields differ",
                                  h.chunk_index() != expected ? absl::StrCat(expected) : "", ")"));
  }
  p.sums.push_back(ChunkSum(m));
  p.frames.push_back(std::move(m.frames_[1]));
  p.last = now;
  if (p.chunks() < p.first.header().num_chunks()) return std::optional<Message>();
  PartialTrain done = std::move(p);
  partial_.erase(it);
  return Join(std::move(done));
}

absl::StatusOr<std::optional<Message>> TrainAssembler::Join(PartialTrain p) {
  const uint64_t declared = p.first.header().train_checksum();
  if (declared != 0 && TrainChecksum(p.sums) != declared) {
    ++trains_cut_;
    return WireError(ErrorCode::BadChecksum,
                     "the train's chunks are not the payload its train checksum names");
  }
  Message joined = std::move(p.first);
  for (auto& f : p.frames) joined.frames_.push_back(std::move(f));
  // Moving frames between vectors may move a small frame's inline storage: point again.
  joined.header_ = GetHeader(joined.frames_[0].data());
  joined.joined_ = true;
  return std::optional<Message>(std::move(joined));
}

void TrainAssembler::Drop(const std::string& connection) {
  if (partial_.erase(connection) > 0) ++trains_cut_;
}

bool TrainAssembler::Keep(const std::string& connection, uint32_t worker, uint64_t generation,
                          absl::Time now) {
  auto it = partial_.find(connection);
  if (it == partial_.end()) return false;
  PartialTrain p = std::move(it->second);
  partial_.erase(it);
  ++trains_cut_;
  const Header& h = p.first.header();
  const bool resumable = h.type() == MsgType::Push || h.type() == MsgType::InitFragment;
  if (!resumable || h.worker_id() != worker || h.generation() != generation ||
      h.train_checksum() == 0)
    return false;
  return kept_.Put(std::move(p), now);
}

size_t TrainAssembler::DropIdleSince(absl::Time cutoff) {
  const size_t n =
      absl::erase_if(partial_, [&](const auto& kv) { return kv.second.last < cutoff; });
  trains_cut_ += n;
  return n;
}

uint64_t TrainAssembler::partial_bytes() const {
  uint64_t n = 0;
  for (const auto& [_, p] : partial_) n += p.bytes();
  return n;
}

}  // namespace diloco::wire
