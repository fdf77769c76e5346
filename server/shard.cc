// Shard, creation, dispatch and admission: Hello, Init, Push, Pull and Heartbeat (the other
// parts of the class: server/shard_internal.h).
#include "server/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash_uniform.h"
#include "common/model_refusal.h"
#include "kernels/codec.h"
#include "schema/payload_check.h"
#include "server/shard_internal.h"

namespace diloco::server {

namespace {

// The staleness histogram's bucket: 0, 1, 2, 3, 4-7, 8-15, 16-31, 32+.
int StalenessBucket(uint64_t s) {
  if (s < 4) return static_cast<int>(s);
  if (s < 8) return 4;
  if (s < 16) return 5;
  if (s < 32) return 6;
  return 7;
}

// ShardOptions::test_drop_pushes: the hash's seed is this, plus the shard, plus test_drop_seed
// in the high half.
constexpr uint64_t kDropSeed = 0x5EED0000;

}  // namespace

Shard::Shard(const ShardOptions& o, const Clock* clock, Plan plan)
    : opt_(o),
      clock_(clock),
      plan_(std::move(plan)),
      workers_(o.worker_timeout),
      trains_(o.keep_trains) {}
Shard::~Shard() = default;

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(const ShardOptions& o, const Clock* clock) {
  if (o.shard >= o.num_shards)
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", o.shard, " out of range for ", o.num_shards, " shards"));
  if (o.round.quorum == 0) return absl::InvalidArgumentError("quorum must be at least 1");
  if (o.outer_mode == OuterMode::kDelayedNesterov && o.merge == MergeRule::kRda)
    return absl::InvalidArgumentError("RDA merges a round; Delayed Nesterov has no rounds");
  if (o.dn_period < 1) return absl::InvalidArgumentError("Delayed Nesterov period must be >= 1");
  if (auto st = kernels::ValidateCodec(o.download); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat("download codec: ", st.message()));
  if (o.download.kind != kernels::CodecKind::kFp32 && o.download_chain == 0)
    return absl::InvalidArgumentError("a quantized download needs a chain of at least 1 update");
  auto manifest =
      o.manifest.tensors().empty() ? GptManifest(o.model) : absl::StatusOr<Manifest>(o.manifest);
  if (!manifest.ok()) return manifest.status();
  auto plan = Plan::Create(*manifest, o.num_fragments, o.num_shards);
  if (!plan.ok()) return plan.status();
  if (o.apply_threads < 0) return absl::InvalidArgumentError("apply threads must be >= 0");
  if (!(o.test_drop_pushes >= 0 && o.test_drop_pushes < 1))
    return absl::InvalidArgumentError("the fraction of pushes to drop must be in [0, 1)");
  for (const double cap : {o.push_steps_cap, o.push_norm_cap})
    if (!(cap == 0 || (cap >= 1 && std::isfinite(cap))))
      return absl::InvalidArgumentError(
          absl::StrCat("a push cap of ", cap, ": must be 0 (off) or at least 1 (x the median)"));
  std::unique_ptr<Shard> s(new Shard(o, clock, std::move(*plan)));
  s->apply_ = std::make_unique<ApplyPool>(o.apply_threads);
  s->model_fingerprint_ = manifest->fingerprint();
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
    if (o.download.kind != kernels::CodecKind::kFp32)
      f->downloads = std::make_unique<DownloadChain>(o.download, f->spec->numel);
    f->merge = MakeRoundMerge(o.merge, f->spec->numel);
    f->steps_cap = MedianCap(o.push_steps_cap);
    f->norm_cap = MedianCap(o.push_norm_cap);
    f->outer = MakeOuterStep(o.outer_mode, o.step, o.outer, o.dn_period, f->spec->numel);
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

void Shard::CountWeightCap(const wire::Header& h, const FragmentState& f, double steps,
                           double limit) {
  ++counters_.pushes_weight_capped;
  LogThrottled(weight_cap_log_,
               absl::StrFormat("weight capped: worker %u (fragment %u, seq %u) claims %u steps "
                               "and %u tokens, over %g x the median %g steps of recent pushes: "
                               "weighed as %g steps",
                               h.worker_id(), f.spec->id, h.seq(), h.steps(), h.tokens(),
                               opt_.push_steps_cap, limit / opt_.push_steps_cap, steps));
}

void Shard::CountNormClips(FragmentState& f) {
  for (const auto& c : f.norm_clips) {
    ++counters_.pushes_norm_clipped;
    LogThrottled(norm_clip_log_,
                 absl::StrFormat("norm clipped: worker %u (fragment %u, seq %u) sent a delta of "
                                 "L2 norm %g, over %g x the median %g of recent pushes: scaled "
                                 "down to %g",
                                 c.worker, f.spec->id, c.seq, c.norm, opt_.push_norm_cap,
                                 c.limit / opt_.push_norm_cap, c.limit));
  }
  f.norm_clips.clear();
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

void Shard::Unbind(const std::string& rid) {
  auto b = bound_.find(rid);
  if (b == bound_.end()) return;
  if (WorkerInfo* w = workers_.Find(b->second.worker)) {
    if (w->rid == rid) w->rid.clear();
    if (w->control_rid == rid) {
      w->control_rid.clear();
      w->answers_on_control = false;
    }
  }
  bound_.erase(b);
  cut_trains_.erase(rid);
}

void Shard::OnHello(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kAnyConnection); !s.ok()) return Refuse(rid, s, &h, out);
  const bool control = h.channel() == wire::Channel::Control;
  if (control) {
    // The heartbeat connection joins a worker already bound on its data connection, in the
    // same generation; it carries nothing that changes state.
    const WorkerInfo* bound = workers_.Find(h.worker_id());
    if (!bound || bound->rid.empty() || bound->generation != h.generation())
      return Refuse(rid,
                    WireError(ErrorCode::BadIdentity,
                              absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                           " has no data connection here: Hello on it first")),
                    &h, out);
    if (auto b = bound_.find(rid); b != bound_.end() && !b->second.control)
      return Refuse(rid, WireError(ErrorCode::BadIdentity, "this is a data connection"), &h, out);
  }
  WorkerInfo* w = &workers_.Add(h.worker_id());
  if (h.generation() < w->generation)
    return Refuse(rid,
                  WireError(ErrorCode::BadIdentity,
                            absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                         " is older than ", w->generation)),
                  &h, out);
  if (w->left && h.generation() == w->generation)
    return Refuse(rid,
                  WireError(ErrorCode::BadIdentity,
                            absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                         " has left: a new start is a new generation")),
                  &h, out);
  if (control) {
    if (w->control_rid != rid) {
      Unbind(w->control_rid);
      Unbind(rid);
    }
    bound_[rid] = {w->id, true};
    w->control_rid = rid;
    w->answers_on_control = h.answers_on_control();
  } else {
    if (h.generation() > w->generation) {  // a restarted worker: a fresh sequence
      w->generation = h.generation();
      w->left = false;  // a worker that left and started again rejoins
      w->applied_seq.clear();
      dirty_ = true;
      Unbind(w->control_rid);  // the old process's
      w->connection = 0;
    }
    // A Hello from a data connection the worker has since replaced with a newer one: the worker
    // closed it, and what it left queued here is read only now (a shard that took long to
    // recover had its port bound, unread, while the worker gave up on it and reconnected). It
    // must not take the worker from its live connection, whose messages would then be refused.
    if (h.connection() < w->connection) {
      ++counters_.hellos_superseded;
      return Refuse(
          rid,
          WireError(ErrorCode::BadIdentity,
                    absl::StrCat("connection ", h.connection(), " of worker ", h.worker_id(),
                                 " was replaced by its connection ", w->connection)),
          &h, out);
    }
    w->connection = h.connection();
    // A worker id lives on one data connection at a time, a connection serves one worker. A push
    // train the old one left unfinished is kept for the worker to resume here.
    if (w->rid != rid) {
      if (!w->rid.empty()) trains_.Keep(w->rid, w->id, w->generation, clock_->Now());
      Unbind(w->rid);
      Unbind(rid);
    }
    bound_[rid] = {w->id, false};
    w->rid = rid;
  }
  w->last_seen = clock_->Now();
  Outgoing o{rid, Reply(MsgType::Welcome), {}};
  o.header.worker_id = w->id;
  o.header.generation = w->generation;
  o.header.channel = h.channel();
  o.header.credit_bytes = opt_.worker_credit_bytes;
  for (uint32_t id : owned_) o.header.versions.emplace_back(id, fragments_.at(id)->published);
  o.header.fleet_step_time_us = static_cast<uint64_t>(workers_.FleetStepTimeUs(clock_->Now()));
  if (!control) o.header.held_trains = trains_.kept().Held(w->id, w->generation);
  out->push_back(std::move(o));
}

void Shard::OnInit(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kData); !s.ok()) return Refuse(rid, s, &h, out);
  FragmentState* fp = OwnedFragment(rid, h, out);
  if (!fp) return;
  FragmentState& f = *fp;
  Outgoing ack{rid, Reply(MsgType::PushAck), {}};
  ack.header.worker_id = h.worker_id();
  ack.header.fragment_id = f.spec->id;
  ack.header.seq = h.seq();
  if (f.version > 0) {
    ack.header.ack = AckStatus::AlreadyInitialized;
    ack.header.version = f.published;
    if (f.published == 0) {  // theta(0) is being made durable: answered with the first
      f.init_acks.push_back(std::move(ack));
      return;
    }
    out->push_back(std::move(ack));
    return;
  }
  if (h.codec() != static_cast<uint8_t>(wire::kFragmentCodec.kind) ||
      h.block() != wire::kFragmentCodec.block || h.topk() != 0)
    return Refuse(rid, WireError(ErrorCode::BadCodec, "InitFragment must be fp32:256"), &h, out);
  if (auto s = wire::CheckEncodedPayload(m, wire::kFragmentCodec, f.spec->numel); !s.ok())
    return Refuse(rid, s, &h, out);
  for (const wire::PayloadChunk& c : wire::PayloadLayout(wire::kFragmentCodec, f.spec->numel))
    std::memcpy(f.theta().data() + c.offset, m.payload(c.index).data(), c.bytes);
  std::fill(f.momentum.begin(), f.momentum.end(), 0.0f);
  if (f.downloads) f.downloads->Reset();
  f.version = 1;
  dirty_ = true;
  ack.header.ack = AckStatus::Initialized;
  if (!store_) {
    Publish(f, out);
    ack.header.version = f.published;
    out->push_back(std::move(ack));
    return;
  }
  // theta(0) is durable before anyone can pull it, in every durability mode: the answer waits
  // for the synced checkpoint holding it (retried after a failed write, never refused).
  f.init_acks.push_back(std::move(ack));
  MaybeStartCheckpoint(clock_->Now());
  PublishReady(out);
}

// A push's Queued answer goes on the worker's control connection when it takes it there: on the
// data connection it would wait behind every fragment update already queued to that worker (on
// a 10 Mbit/s link a 6 MB fp32 update takes 5 s), and the worker, hearing nothing, would send
// the push again. Applied answers ride on the updates themselves and stay on the data connection.
const std::string& Shard::QueuedAnswerRid(const WorkerInfo& w, const std::string& data_rid) const {
  return w.answers_on_control && !w.control_rid.empty() ? w.control_rid : data_rid;
}

void Shard::OnPush(const std::string& rid, wire::Message m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kData); !s.ok()) {
    ++counters_.pushes_refused;
    return Refuse(rid, s, &h, out);
  }
  FragmentState* fp = OwnedFragment(rid, h, out);
  if (!fp) return;
  FragmentState& f = *fp;
  if (f.version == 0)
    return Refuse(rid, WireError(ErrorCode::NotInitialized, "fragment has no theta(0) yet"), &h,
                  out);
  WorkerInfo& w = workers_.Get(h.worker_id());
  Outgoing ack{rid, Reply(MsgType::PushAck), {}};
  ack.header.worker_id = w.id;
  ack.header.generation = w.generation;
  ack.header.fragment_id = f.spec->id;
  ack.header.seq = h.seq();
  ack.header.version = f.published;
  // Exactly once: applied before, or already waiting in the open round. Sequence numbers are a
  // generation's own: a restarted worker counts from 1 again while its dead process's push may
  // still wait in the round, which is another push (it is merged, its answer goes nowhere).
  const uint64_t applied = w.applied_seq.contains(f.spec->id) ? w.applied_seq[f.spec->id] : 0;
  const auto mine = [&](const auto& c) { return c.worker == w.id && c.generation == w.generation; };
  bool in_round = false;
  for (const auto& c : f.contributors) in_round |= mine(c) && c.seq == h.seq();
  for (const auto& c : f.unacked) in_round |= mine(c) && c.seq == h.seq();
  if (h.seq() <= applied || in_round) {
    ++counters_.pushes_duplicate;
    ack.header.ack = in_round ? AckStatus::Queued : AckStatus::Duplicate;
    if (in_round) ack.routing_id = QueuedAnswerRid(w, rid);
    out->push_back(std::move(ack));
    return;
  }
  for (const auto& c : f.contributors)
    if (mine(c))
      return Refuse(rid,
                    WireError(ErrorCode::Malformed,
                              "a second push for a fragment whose previous push is not applied"),
                    &h, out);
  // Credit: bytes in flight per worker stay bounded however many fragments it pushes.
  const uint64_t held = HeldBytes(w.id, w.generation);
  if (opt_.worker_credit_bytes > 0 && held > 0 &&
      held + m.payload_bytes() > opt_.worker_credit_bytes) {
    ++counters_.pushes_no_credit;
    return Refuse(rid,
                  WireError(ErrorCode::NoCredit,
                            absl::StrCat("worker ", w.id, " has ", held, " bytes held here; ",
                                         m.payload_bytes(), " more exceed its credit of ",
                                         opt_.worker_credit_bytes, ": resend after an answer")),
                  &h, out);
  }
  // Staleness against the applied version; a base from the future (a shard that lost
  // unsynced versions) is as useless as a too-old one: both re-pull.
  const uint64_t staleness = wire::Staleness(h.base_version(), f.version + 1);
  if (h.base_version() > f.version || staleness > opt_.max_staleness) {
    ++counters_.pushes_stale;
    ack.header.ack = AckStatus::Stale;
    ack.header.message = absl::StrCat("base version ", h.base_version(), ", fragment is at ",
                                      f.version, ": pull and push again");
    out->push_back(std::move(ack));
    return;
  }
  auto codec = kernels::Codec{static_cast<kernels::CodecKind>(h.codec()), h.block(), h.topk()};
  if (auto s = kernels::ValidateCodec(codec); !s.ok())
    return Refuse(rid, WireError(ErrorCode::BadCodec, s.message()), &h, out);
  if (auto s = wire::CheckEncodedPayload(m, codec, f.spec->numel); !s.ok())
    return Refuse(rid, s, &h, out);
  if (h.tokens() == 0 || h.steps() == 0)
    return Refuse(rid, WireError(ErrorCode::Malformed, "push without tokens or steps"), &h, out);

  // The weight cap (server/push_guard.h): a push claiming far more steps than the fragment's
  // recent pushes is weighed as if it held cap x their median steps, its tokens scaled alike.
  const MedianCap::Admitted steps = f.steps_cap.Admit(h.steps());
  const double capped =
      steps.capped ? CappedWeightFactor(opt_.weights, steps.value / h.steps()) : 1.0;
  if (steps.capped) CountWeightCap(h, f, steps.value, steps.limit);
  const double wgt =
      PushWeight(opt_.weights, h.tokens(), h.steps(), staleness, opt_.staleness_alpha) * capped;
  // What this worker brings to a round of this fragment, undiscounted: a round it misses
  // counts it as a zero delta of this weight (RoundNorm::kExpected).
  PushRate& rate = w.push_rate[f.spec->id];
  rate.weight =
      Ema(rate.weight, PushWeight(opt_.weights, h.tokens(), h.steps(), 0, 0) * capped, kEmaWeight);
  if (const absl::Time now = clock_->Now(); now > rate.last) {
    if (rate.last != absl::InfinitePast())
      rate.interval_s = Ema(rate.interval_s, absl::ToDoubleSeconds(now - rate.last), kEmaWeight);
    rate.last = now;
  }
  const bool drop =
      opt_.test_drop_pushes > 0 && HashUniform(kDropSeed + opt_.shard + (opt_.test_drop_seed << 32),
                                               w.id, f.spec->id, h.seq()) < opt_.test_drop_pushes;
  auto msg = std::make_shared<wire::Message>(std::move(m));
  if (drop) {
    ++counters_.pushes_dropped;
  } else {
    HeldPush p{msg, codec, w.id, w.generation, h.seq(), wgt};
    if (opt_.merge_order == MergeOrder::kWorker)
      f.held.push_back(std::move(p));  // merged in worker order when the round closes
    else
      MergePush(f, p);
  }
  const absl::Time now = clock_->Now();
  if (f.round.pushes == 0) f.round.opened = now;
  ++f.round.pushes;
  if (f.round.pushes == Round().quorum) {
    f.round.quorum_reached = now;
    timings_.time_to_quorum_s =
        Ema(timings_.time_to_quorum_s, absl::ToDoubleSeconds(now - f.round.opened), kEmaWeight);
  }
  const uint64_t bytes = msg->payload_bytes();
  f.contributors.push_back(
      {rid, w.id, w.generation, h.seq(), bytes, h.base_version(), h.tokens(), h.steps(), now});
  counters_.max_held_bytes = std::max(counters_.max_held_bytes, held + bytes);
  timings_.inner_steps = Ema(timings_.inner_steps, steps.value, kEmaWeight);
  if (h.step_time_us() > 0) w.step_time_us = h.step_time_us();  // the worker's own average
  ++counters_.pushes_queued;
  ++counters_.staleness_hist[StalenessBucket(staleness)];
  counters_.staleness_sum += staleness;
  ack.header.ack = AckStatus::Queued;
  ack.header.round = counters_.rounds;
  ack.routing_id = QueuedAnswerRid(w, rid);
  out->push_back(std::move(ack));
  // Per-arrival mode: Tick publishes (after the checkpoint if due); a fragment whose theta is
  // being written takes this push in the round Tick closes after the write.
  if (f.outer->PerArrival() && !f.writing) CloseRound(f);
}

void Shard::OnPull(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kData); !s.ok()) return Refuse(rid, s, &h, out);
  FragmentState* fp = OwnedFragment(rid, h, out);
  if (!fp) return;
  FragmentState& f = *fp;
  if (f.published == 0)
    return Refuse(rid, WireError(ErrorCode::NotInitialized, "fragment has no theta(0) yet"), &h,
                  out);
  Outgoing o{rid, Reply(MsgType::FragmentUpdate), {}};
  FillUpdate(f, h.worker_id(), /*base=*/0, &o);  // a pull is answered whole
  o.header.worker_id = h.worker_id();
  out->push_back(std::move(o));
}

void Shard::OnHeartbeat(const std::string& rid, const wire::Message& m,
                        std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kDataOrControl); !s.ok()) return Refuse(rid, s, &h, out);
  WorkerInfo& w = workers_.Get(h.worker_id());
  if (h.step_time_us() > 0) w.step_time_us = h.step_time_us();
  Outgoing o{rid, Reply(MsgType::Heartbeat), {}};
  o.header.worker_id = w.id;
  for (uint32_t id : owned_) o.header.versions.emplace_back(id, fragments_.at(id)->published);
  o.header.fleet_step_time_us = static_cast<uint64_t>(workers_.FleetStepTimeUs(clock_->Now()));
  out->push_back(std::move(o));
}

RoundPolicy Shard::Round() const {
  RoundPolicy p = opt_.round;
  p.quorum =
      QuorumAfterLeaves(p.quorum, static_cast<uint32_t>(workers_.size()), workers_.LeftCount());
  return p;
}

// Leave (docs/protocol.md, "Leaving"). The worker's pushes already in open rounds stay there and
// are merged; what changes is what the rounds wait for and how a round's share is reckoned: a
// worker that left is not live, so it is neither waited for nor counted as a zero delta, and the
// quorum drops with the fleet. A round whose quorum that reaches counts it reached now.
void Shard::OnLeave(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  absl::Status s =
      m.num_payloads() == 0
          ? CheckCommon(rid, h, Via::kDataOrControl)
          : WireError(ErrorCode::Malformed, absl::StrCat("a Leave carries no payload, this one ",
                                                         m.num_payloads(), " frames"));
  if (!s.ok()) {
    ++counters_.leaves_refused;
    return Refuse(rid, s, &h, out);
  }
  WorkerInfo& w = workers_.Get(h.worker_id());
  Outgoing o{rid, Reply(MsgType::Leave), {}};
  o.header.worker_id = w.id;
  o.header.generation = w.generation;
  if (w.left) {
    ++counters_.leaves_repeated;
    out->push_back(std::move(o));
    return;
  }
  const uint32_t before = Round().quorum;
  w.left = true;
  ++counters_.leaves;
  const absl::Time now = clock_->Now();
  const uint32_t quorum = Round().quorum;
  for (auto& [_, f] : fragments_)
    if (f->round.pushes >= quorum && f->round.pushes < before) f->round.quorum_reached = now;
  log_lines_.push_back(absl::StrCat("worker ", w.id, " generation ", w.generation,
                                    " left: live workers ", workers_.LiveCount(now), ", quorum ",
                                    quorum, " (of ", opt_.round.quorum, ")"));
  out->push_back(std::move(o));
}

}  // namespace diloco::server
