// Shard, creation and dispatch (server/shard_internal.h): Create, the message loop's Handle with
// its cut trains, the checks every message passes, and refusals.
#include "server/shard.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model_refusal.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"
#include "server/shard_internal.h"
#include "server/shard_validate.h"

namespace diloco::server {

Shard::Shard(const ShardOptions& o, const Clock* clock, Plan plan)
    : opt_(o),
      clock_(clock),
      plan_(std::move(plan)),
      workers_(o.worker_timeout),
      trains_(o.keep_trains) {}
Shard::~Shard() = default;

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(const ShardOptions& o, const Clock* clock) {
  if (auto st = Validate(o); !st.ok()) return st;
  if (o.manifest.tensors().empty())
    return absl::InvalidArgumentError("the shard needs its model's manifest (--model)");
  auto plan = Plan::Create(o.manifest, o.num_fragments, o.num_shards);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<Shard> s(new Shard(o, clock, std::move(*plan)));
  s->apply_ = std::make_unique<ApplyPool>(o.apply_threads);
  s->model_fingerprint_ = o.manifest.fingerprint();
  std::random_device rd;
  s->incarnation_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                    static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  s->owned_ = s->plan_.FragmentsOfShard(o.shard);
  // Kept for reuse: enough for every owned fragment's round open at once (non-streamed
  // pushes): one accumulator each plus one theta copy, since rounds close in turn and each
  // round's accumulator serves the next round's copy. That is 4 (F + 1) / F bytes per owned
  // parameter for F fragments of equal size (4.5 at 8: with theta and momentum, the 12.5 of
  // the shard's memory bound), less what the quantized downloads hold (PoolBudget). Rounds
  // closing one at a time (streamed pushes) circulate a few; buffers no round took for
  // buffer_idle are freed. Every buffer, theta's first one too, reserves the largest fragment's
  // bytes (unused pages cost nothing), so that any buffer the pool keeps serves any fragment.
  uint64_t largest = 0, owned_bytes = 0;
  for (uint32_t id : s->owned_) {
    largest = std::max<uint64_t>(largest, s->plan_.fragment(id).numel * sizeof(float));
    owned_bytes += s->plan_.fragment(id).numel * sizeof(float);
  }
  s->round_buffer_bytes_ = s->owned_.empty() ? 0 : owned_bytes + owned_bytes / s->owned_.size();
  s->pool_ = BufferPool(s->round_buffer_bytes_, o.buffer_idle, largest);
  for (uint32_t id : s->owned_) {
    auto f = std::make_unique<FragmentState>();
    f->spec = &s->plan_.fragment(id);
    f->theta_buf = s->pool_.Take(f->spec->numel * sizeof(float));  // fresh: zeroed
    f->momentum.assign(f->spec->numel, 0.0f);
    s->owned_params_ += f->spec->numel;
    if (!kernels::EntryOf(o.download).exact)
      f->downloads =
          std::make_unique<DownloadChain>(o.download, f->spec->numel, o.download_keyframe_every);
    f->steps_cap = MedianCap(o.push_steps_cap);
    f->norm_cap = MedianCap(o.push_norm_cap);
    f->dense.merge = MakeRoundMerge(o.merge, f->spec->numel);
    f->dense.outer = MakeOuterStep(
        o.outer_mode, o.step, o.outer_choice == OuterChoice::kSparse ? o.sparse_outer : o.outer,
        o.dn_period, f->spec->numel);
    if (o.outer_choice == OuterChoice::kAuto && !f->dense.outer->PerArrival()) {
      f->sparse.merge = MakeRoundMerge(o.merge, f->spec->numel);
      f->sparse.outer = MakeSparseStep(o.sparse_outer.lr);
    }
    s->fragments_[id] = std::move(f);
  }
  s->last_checkpoint_time_ = clock->Now();
  if (!o.store_path.empty()) {
    storage::StoreIdentity ident{s->plan_.fingerprint(), s->model_fingerprint_, o.shard,
                                 o.num_shards};
    if (auto st = s->Recover(ident); !st.ok()) return st;
    s->writer_ = std::make_unique<CheckpointWriter>(s->store_.get(), o.checkpoint_thread,
                                                    o.test_before_checkpoint_write);
  }
  return s;
}

HeaderFields Shard::Reply(MsgType type) const {
  HeaderFields h;
  h.type = type;
  h.plan_fingerprint = plan_.fingerprint();
  h.model_fingerprint = model_fingerprint_;
  h.shard = opt_.shard;
  h.incarnation = incarnation_;
  return h;
}

void Shard::Refuse(const std::string& rid, const absl::Status& s, const wire::Header* h,
                   std::vector<Outgoing>* out) {
  Refuse(rid, s, h ? RefusedIds::Of(*h) : RefusedIds{}, out);
}

void Shard::Refuse(const std::string& rid, const absl::Status& s, RefusedIds ids,
                   std::vector<Outgoing>* out) {
  ++counters_.messages_bad;
  const ErrorCode code = wire::ErrorCodeOf(s);
  const size_t reason = std::min(static_cast<size_t>(code), kErrorCodes - 1);
  ++counters_.refused_by_reason[reason];
  LogThrottled(refusal_log_[reason],
               absl::StrCat("refused a message from worker ", ids.worker, " (fragment ",
                            ids.fragment, ", seq ", ids.seq, "): ", s.message()));
  Outgoing o{rid, Reply(MsgType::Error), {}};
  o.header.error_code = code;
  o.header.message = std::string(s.message());
  o.header.worker_id = ids.worker;
  o.header.fragment_id = ids.fragment;
  o.header.seq = ids.seq;
  o.header.refused_type = ids.type;
  out->push_back(std::move(o));
}

void Shard::LogThrottled(LogThrottle& throttle, std::string line) {
  const absl::Time now = clock_->Now();
  if (now - throttle.last < kRefusalLogInterval) {
    ++throttle.unlogged;
    return;
  }
  if (throttle.unlogged)
    absl::StrAppend(&line, " (and ", throttle.unlogged,
                    " more for this reason since the last such line)");
  log_lines_.push_back(std::move(line));
  throttle.last = now;
  throttle.unlogged = 0;
}

void Shard::RefuseUnbound(const std::string& rid, const absl::Status& s,
                          const wire::MessageIds& claimed, std::vector<Outgoing>* out) {
  ++counters_.identity_refused;
  Refuse(rid, s, claimed, out);
}

void Shard::Handle(const std::string& rid, std::vector<zmq::message_t> frames,
                   std::vector<Outgoing>* out) {
  for (const auto& f : frames) counters_.bytes_in += f.size();
  // A header that verifies names the message even when its payload is refused (BadChecksum,
  // BadLength), and a chunk that does not continue its train names the push it claims: the
  // worker can tell which push to resend. A header that fails its own checksum names nothing
  // (BadChecksum, ids 0, refused_type Invalid): its seq or fragment may be the damaged field,
  // so the worker's lost-push resend, not this answer, sends the push again.
  //
  // One answer per train: the chunk that ends a train (refused at any step) answers for it, and
  // the train's later chunks are dropped unanswered. Were each refused too (Malformed, naming
  // the push), a worker that resends a push on a payload BadChecksum would get refusals after
  // its resend was sent, and could not tell them from the resend's own: giving the push up
  // then, while the resend is applied, counts its delta twice (docs/worker.md "Acks, resends,
  // exactly once").
  RefusedIds ids;
  const absl::Time now = clock_->Now();
  auto parsed = wire::ParseMessage(std::move(frames), {}, &ids);
  if (!parsed.ok()) {
    trains_.Drop(rid);  // a refused chunk ends its train
    cut_trains_.erase(rid);
    if (ids.type == MsgType::Invalid) {
      // Its header named nothing: it may have been a chunk of any train.
      cut_trains_[rid] = {true, ids, 0, 0, now};
    } else if (ids.num_chunks > 1) {  // ids come from its verified header
      CutTrainAt(rid, ids, ids.chunk_index, ids.num_chunks);
    }
    return Refuse(rid, parsed.status(), ids, out);
  }
  const uint32_t index = parsed->header().chunk_index();
  const uint32_t num_chunks = parsed->header().num_chunks();
  const bool later_chunk = parsed->is_chunk() && index > 0;
  if (!later_chunk) cut_trains_.erase(rid);  // a new train or a whole message
  if (later_chunk && !trains_.in_progress(rid)) {
    // A train resumed on this connection continues what a lost one left (Hello first: only the
    // worker bound here may continue its own push); else the chunk is out of place.
    if (ContinuesCutTrain(rid, ids, index, num_chunks)) {
      ++counters_.messages_bad;
      ++counters_.cut_train_chunks;
      return;
    }
    if (auto s = CheckCommon(rid, parsed->header(), Via::kData); !s.ok()) {
      CutTrainAt(rid, ids, index, num_chunks);  // its refusal answers for it
      return Refuse(rid, s, ids, out);
    }
  }
  auto whole = trains_.Add(rid, *std::move(parsed), now);
  if (!whole.ok()) {
    if (later_chunk && ContinuesCutTrain(rid, ids, index, num_chunks)) {
      ++counters_.messages_bad;
      ++counters_.cut_train_chunks;
      return;
    }
    cut_trains_.erase(rid);
    if (later_chunk) CutTrainAt(rid, ids, index, num_chunks);  // its refusal answers for it
    return Refuse(rid, whole.status(), ids, out);
  }
  if (!whole->has_value()) return;  // more chunks to come
  wire::Message* m = &**whole;
  switch (m->type()) {
    case MsgType::Hello:
      return OnHello(rid, *m, out);
    case MsgType::InitFragment:
      return OnInit(rid, *m, out);
    case MsgType::Push:
      return OnPush(rid, std::move(*m), out);
    case MsgType::Pull:
      return OnPull(rid, *m, out);
    case MsgType::Heartbeat:
      return OnHeartbeat(rid, *m, out);
    case MsgType::Leave:
      return OnLeave(rid, *m, out);
    case MsgType::Stats: {
      Outgoing o{rid, Reply(MsgType::Stats), {}};
      o.header.message = StatsJson();
      out->push_back(std::move(o));
      return;
    }
    default:
      return Refuse(rid,
                    WireError(ErrorCode::UnknownType,
                              absl::StrCat("a shard does not accept ", MsgTypeName(m->type()))),
                    &m->header(), out);
  }
}

void Shard::CutTrainAt(const std::string& rid, const wire::MessageIds& ids, uint32_t index,
                       uint32_t num_chunks) {
  if (index + 1 < num_chunks) cut_trains_[rid] = {false, ids, index + 1, num_chunks, clock_->Now()};
}

bool Shard::ContinuesCutTrain(const std::string& rid, const wire::MessageIds& ids, uint32_t index,
                              uint32_t num_chunks) {
  auto it = cut_trains_.find(rid);
  if (it == cut_trains_.end()) return false;
  const CutTrain& c = it->second;
  const bool continues = c.any || (c.ids.worker == ids.worker && c.ids.fragment == ids.fragment &&
                                   c.ids.seq == ids.seq && c.ids.type == ids.type &&
                                   c.next == index && c.num_chunks == num_chunks);
  if (!continues) return false;
  cut_trains_.erase(it);
  CutTrainAt(rid, ids, index, num_chunks);  // its next chunk, unless this was the last
  return true;
}

absl::Status Shard::CheckCommon(const std::string& rid, const wire::Header& h, Via via) {
  // Another model means another plan too: the refusal then names the shard's model.
  const bool other_model = h.model_fingerprint() != model_fingerprint_;
  const auto model_refusal = [&] {
    return ModelRefusal(h.model_fingerprint(), model_fingerprint_, opt_.model_spec);
  };
  if (h.plan_fingerprint() != plan_.fingerprint())
    return WireError(ErrorCode::WrongPlan,
                     other_model
                         ? model_refusal()
                         : absl::StrFormat("plan %016x, this shard serves plan %016x (check "
                                           "--model, --fragments, --shards)",
                                           h.plan_fingerprint(), plan_.fingerprint()));
  if (other_model) return WireError(ErrorCode::WrongModel, model_refusal());
  if (via != Via::kAnyConnection) {
    auto it = bound_.find(rid);
    if (it == bound_.end())
      return WireError(ErrorCode::BadIdentity, "no Hello on this connection: send Hello first");
    if (it->second.worker != h.worker_id())
      return WireError(ErrorCode::BadIdentity,
                       absl::StrCat("connection belongs to worker ", it->second.worker,
                                    ", message claims worker ", h.worker_id()));
    if (it->second.control && via != Via::kDataOrControl)
      return WireError(ErrorCode::BadIdentity,
                       absl::StrCat("a control connection carries heartbeats only, not ",
                                    MsgTypeName(h.type())));
    WorkerInfo& w = workers_.Get(h.worker_id());
    if (w.generation != h.generation())
      return WireError(ErrorCode::BadIdentity,
                       absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                    " superseded by ", w.generation));
    // A generation that left sends nothing more that counts; a Leave repeated (its answer lost)
    // is answered again, and a heartbeat sent before the answer came is answered as usual.
    if (w.left && h.type() != MsgType::Leave && h.type() != MsgType::Heartbeat)
      return WireError(ErrorCode::BadIdentity,
                       absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                    " has left: a new start is a new generation"));
    w.last_seen = clock_->Now();
    if (!it->second.control) w.rid = rid;
  }
  return absl::OkStatus();
}

Shard::FragmentState* Shard::OwnedFragment(const std::string& rid, const wire::Header& h,
                                           std::vector<Outgoing>* out) {
  auto it = fragments_.find(h.fragment_id());
  if (it != fragments_.end()) return it->second.get();
  Refuse(rid,
         WireError(ErrorCode::UnknownFragment,
                   absl::StrCat("fragment ", h.fragment_id(), " is not on shard ", opt_.shard)),
         &h, out);
  return nullptr;
}

}  // namespace diloco::server
