#include "server/shard.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"
#include "common/event_log.h"
#include "common/process_memory.h"
#include "kernels/codec.h"
#include "kernels/outer.h"
#include "schema/payload_check.h"
#include "server/counter_table.h"
#include "server/download_chain.h"

namespace diloco::server {

using wire::AckStatus;
using wire::ErrorCode;
using wire::HeaderFields;
using wire::MsgType;
using wire::WireError;

namespace {

double Ema(double old, double x, double a = 0.2) { return old == 0 ? x : (1 - a) * old + a * x; }

// The checksum of each fp32 chunk frame of a snapshot, as FillUpdate will cut it.
std::shared_ptr<const std::vector<uint64_t>> SnapshotChecksums(const wire::Bytes& b) {
  auto sums = std::make_shared<std::vector<uint64_t>>();
  for (const wire::PayloadChunk& c : wire::PayloadLayout(wire::kFragmentCodec, b.size() / 4))
    sums->push_back(Checksum64(b.data() + c.byte_offset, c.bytes));
  return sums;
}

int StalenessBucket(uint64_t s) {
  if (s < 4) return static_cast<int>(s);
  if (s < 8) return 4;
  if (s < 16) return 5;
  if (s < 32) return 6;
  return 7;
}

}  // namespace

struct Shard::FragmentState {
  const Fragment* spec = nullptr;
  uint64_t version = 0;    // applied
  uint64_t published = 0;  // visible to workers (== version unless a checkpoint is pending)
  uint64_t durable = 0;    // the version the store's newest checkpoint holds
  // Its theta and momentum are borrowed by the checkpoint in flight: read-only until the write
  // is done (its next round closes after it; pushes keep merging into acc meanwhile).
  bool writing = false;
  std::vector<Outgoing> init_acks;  // Initialized answers held until theta(0) is durable
  // The live theta, in a shared buffer: once published it is also `snapshot` (sends read it
  // zero-copy), and the next round that changes it writes a new buffer (StepRound).
  std::shared_ptr<wire::Bytes> theta_buf;
  std::vector<float> momentum;
  double phase = 0;  // RoundStep::kComposed: the share of the full round stepped on so far
  // The round's accumulator, from the shard's pool while the round is open (null otherwise).
  std::shared_ptr<wire::Bytes> acc_buf;
  std::span<float> theta() const { return Floats(*theta_buf); }
  std::span<float> acc() const { return Floats(*acc_buf); }
  double weight_sum = 0, weight_ref = 0;  // merged pushes' weights, relative to the first's
  uint32_t merged = 0;                    // pushes merged into acc this round
  OpenRound round;
  struct Contribution {
    std::string rid;
    uint32_t worker = 0;
    uint64_t generation = 0, seq = 0;
    uint64_t bytes = 0;  // payload bytes of the push
    uint64_t base = 0;   // the version the push was trained from: what the worker holds
  };
  std::vector<Contribution> contributors;       // in the open round
  std::vector<Contribution> unacked;            // applied, Applied ack held until published
  std::shared_ptr<const wire::Bytes> snapshot;  // published theta, shared by every send
  std::shared_ptr<const std::vector<uint64_t>> snapshot_sums;  // per chunk, hashed once
  std::unique_ptr<kernels::DelayedNesterov> dn;                // kDelayedNesterov only
  std::vector<std::vector<float>> rda_deltas;  // kRda only: one dense delta per push
  std::vector<float> rda_weights;
  std::unique_ptr<DownloadChain> downloads;  // quantized downloads only
  // Written by the fragment's apply thread, read after ApplyPool::Wait.
  std::atomic<int64_t> last_apply_ns{0};
  std::atomic<uint64_t> apply_errors{0};
};

// What one worker brings to the rounds of one fragment (RoundNorm::kExpected): the moving
// averages of its undiscounted push weight and of the time between its pushes. A full round is
// one push of every live worker at the fleet's cadence (the lower median of the live workers'
// intervals: robust to one worker's jitter); a worker that pushes a quarter as often (a slow
// one, without DyLU) is expected at a quarter of its weight in each round it misses, not at all
// of it, and one at the fleet's cadence or faster at all of it. How the fleet's pushes are cut
// into rounds does not matter.
struct PushRate {
  double weight = 0;      // EMA of the push weight, staleness not discounted
  double interval_s = 0;  // EMA of the seconds between two of its pushes; 0 = unknown
  absl::Time last = absl::InfinitePast();
};

struct Shard::WorkerInfo {
  uint32_t id = 0;
  uint64_t generation = 0;
  std::string rid;          // data connection: pushes, pulls, fragments
  std::string control_rid;  // control connection: heartbeats only (may be empty)
  absl::Time last_seen;
  double step_time_us = 0;  // the worker's moving average inner step time, as it last sent it
  absl::flat_hash_map<uint32_t, uint64_t> applied_seq;  // fragment -> last applied seq
  absl::flat_hash_map<uint32_t, PushRate> push_rate;    // fragment -> what it brings a round
  absl::flat_hash_map<uint32_t, uint64_t> holds;        // fragment -> newest version sent it
};

Shard::Shard(const ShardOptions& o, const Clock* clock, Plan plan)
    : opt_(o), clock_(clock), plan_(std::move(plan)) {}
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
  auto manifest = GptManifest(o.model);
  if (!manifest.ok()) return manifest.status();
  auto plan = Plan::Create(*manifest, o.num_fragments, o.num_shards);
  if (!plan.ok()) return plan.status();
  if (o.apply_threads < 0) return absl::InvalidArgumentError("apply threads must be >= 0");
  if (!(o.test_drop_pushes >= 0 && o.test_drop_pushes < 1))
    return absl::InvalidArgumentError("the fraction of pushes to drop must be in [0, 1)");
  std::unique_ptr<Shard> s(new Shard(o, clock, std::move(*plan)));
  s->apply_ = std::make_unique<ApplyPool>(o.apply_threads);
  s->drop_rng_.seed(0x5EED0000u + o.shard);
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
    if (o.outer_mode == OuterMode::kDelayedNesterov)
      f->dn = std::make_unique<kernels::DelayedNesterov>(o.outer, o.dn_period, f->spec->numel);
    if (o.download.kind != kernels::CodecKind::kFp32)
      f->downloads = std::make_unique<DownloadChain>(o.download, f->spec->numel);
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

absl::Status Shard::Recover(const storage::StoreIdentity& identity) {
  // The zeroed state goes before the checkpoint is loaded (by Open's vetting), so that recovery
  // never holds both.
  for (auto& [_, f] : fragments_) {
    f->theta_buf.reset();
    std::vector<float>().swap(f->momentum);
  }
  absl::Cleanup zero_the_rest = [this] {
    for (auto& [_, f] : fragments_) {
      if (!f->theta_buf) f->theta_buf = std::make_shared<wire::Bytes>(f->spec->numel * 4);
      if (f->momentum.empty()) f->momentum.assign(f->spec->numel, 0.0f);
    }
  };
  storage::StoreOptions so;
  so.accept_rollback = opt_.accept_store_rollback;
  auto store = storage::CheckpointStore::Open(opt_.store_path, identity, so);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  if (!store_->rollback().empty())
    log_lines_.push_back(absl::StrCat("WARNING: --accept_store_rollback: ", store_->rollback(),
                                      "; starting from the newest intact checkpoint"));
  auto cp = store_->LoadLatest();
  if (!cp.ok()) return cp.status();
  if (!cp->has_value()) return absl::OkStatus();
  storage::Checkpoint& c = **cp;
  for (auto& fs : c.fragments) {
    auto it = fragments_.find(fs.id);
    if (it == fragments_.end() || fs.params.size() != it->second->spec->numel ||
        fs.momentum.size() != fs.params.size())
      return absl::DataLossError(
          absl::StrCat("checkpoint ", c.id, ": fragment ", fs.id, " does not fit the plan"));
    FragmentState& f = *it->second;
    f.theta_buf = pool_.Take(fs.params.size() * sizeof(float));
    std::memcpy(f.theta_buf->data(), fs.params.data(), f.theta_buf->size());
    std::vector<float>().swap(fs.params);  // one fragment's copy at a time
    f.momentum = std::move(fs.momentum);   // the loaded buffer becomes the live state
    f.version = f.published = f.durable = fs.version;
    if (f.version > 0) {  // published as it is: the snapshot is theta itself
      f.snapshot = f.theta_buf;
      f.snapshot_sums = SnapshotChecksums(*f.snapshot);
    }
  }
  for (const auto& d : c.dedup) {
    auto& w = workers_[d.worker_id];
    if (!w) {
      w = std::make_unique<WorkerInfo>();
      w->id = d.worker_id;
      w->last_seen = absl::InfinitePast();
    }
    w->generation = d.generation;
    w->applied_seq[d.fragment_id] = d.last_seq;
  }
  checkpoint_id_ = c.id;
  counters_.rounds = rounds_at_checkpoint_ = c.rounds;
  return absl::OkStatus();
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
  RefusalLog& log = refusal_log_[reason];
  if (const absl::Time now = clock_->Now(); now - log.last >= kRefusalLogInterval) {
    log_lines_.push_back(absl::StrCat("refused a message from worker ", ids.worker, " (fragment ",
                                      ids.fragment, ", seq ", ids.seq, "): ", s.message(),
                                      log.unlogged
                                          ? absl::StrCat(" (and ", log.unlogged,
                                                         " more for this reason since the last "
                                                         "such line)")
                                          : ""));
    log.last = now;
    log.unlogged = 0;
  } else {
    ++log.unlogged;
  }
  Outgoing o{rid, Reply(MsgType::Error), {}};
  o.header.error_code = code;
  o.header.message = std::string(s.message());
  o.header.worker_id = ids.worker;
  o.header.fragment_id = ids.fragment;
  o.header.seq = ids.seq;
  o.header.refused_type = ids.type;
  out->push_back(std::move(o));
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
  // worker can tell which push to resend.
  RefusedIds ids;
  auto parsed = wire::ParseMessage(std::move(frames), {}, &ids);
  if (!parsed.ok()) {
    trains_.Drop(rid);  // a refused chunk ends its train
    return Refuse(rid, parsed.status(), ids, out);
  }
  auto whole = trains_.Add(rid, *std::move(parsed), clock_->Now());
  if (!whole.ok()) return Refuse(rid, whole.status(), ids, out);
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

absl::Status Shard::CheckCommon(const std::string& rid, const wire::Header& h, Via via) {
  if (h.plan_fingerprint() != plan_.fingerprint())
    return WireError(ErrorCode::WrongPlan,
                     absl::StrFormat("plan %016x, this shard serves plan %016x (check --model, "
                                     "--fragments, --shards)",
                                     h.plan_fingerprint(), plan_.fingerprint()));
  if (h.model_fingerprint() != model_fingerprint_)
    return WireError(ErrorCode::WrongModel, "model fingerprint differs from the shard's model");
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
    const auto& w = workers_.at(h.worker_id());
    if (w->generation != h.generation())
      return WireError(ErrorCode::BadIdentity,
                       absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                    " superseded by ", w->generation));
    w->last_seen = clock_->Now();
    if (!it->second.control) w->rid = rid;
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
  if (auto w = workers_.find(b->second.worker); w != workers_.end()) {
    if (w->second->rid == rid) w->second->rid.clear();
    if (w->second->control_rid == rid) w->second->control_rid.clear();
  }
  bound_.erase(b);
}

void Shard::OnHello(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kAnyConnection); !s.ok()) return Refuse(rid, s, &h, out);
  const bool control = h.channel() == wire::Channel::Control;
  if (control) {
    // The heartbeat connection joins a worker already bound on its data connection, in the
    // same generation; it carries nothing that changes state.
    auto it = workers_.find(h.worker_id());
    if (it == workers_.end() || it->second->rid.empty() || it->second->generation != h.generation())
      return Refuse(rid,
                    WireError(ErrorCode::BadIdentity,
                              absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                           " has no data connection here: Hello on it first")),
                    &h, out);
    if (auto b = bound_.find(rid); b != bound_.end() && !b->second.control)
      return Refuse(rid, WireError(ErrorCode::BadIdentity, "this is a data connection"), &h, out);
  }
  auto& w = workers_[h.worker_id()];
  if (!w) {
    w = std::make_unique<WorkerInfo>();
    w->id = h.worker_id();
  }
  if (h.generation() < w->generation)
    return Refuse(rid,
                  WireError(ErrorCode::BadIdentity,
                            absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                         " is older than ", w->generation)),
                  &h, out);
  if (control) {
    if (w->control_rid != rid) {
      Unbind(w->control_rid);
      Unbind(rid);
    }
    bound_[rid] = {w->id, true};
    w->control_rid = rid;
  } else {
    if (h.generation() > w->generation) {  // a restarted worker: a fresh sequence
      w->generation = h.generation();
      w->applied_seq.clear();
      dirty_ = true;
      Unbind(w->control_rid);  // the old process's
    }
    // A worker id lives on one data connection at a time, a connection serves one worker.
    if (w->rid != rid) {
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
  o.header.fleet_step_time_us = static_cast<uint64_t>(FleetStepTimeUs());
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
      h.block() != wire::kFragmentCodec.block)
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
  WorkerInfo& w = *workers_.at(h.worker_id());
  Outgoing ack{rid, Reply(MsgType::PushAck), {}};
  ack.header.worker_id = w.id;
  ack.header.generation = w.generation;
  ack.header.fragment_id = f.spec->id;
  ack.header.seq = h.seq();
  ack.header.version = f.published;
  // Exactly once: applied before, or already waiting in the open round.
  const uint64_t applied = w.applied_seq.contains(f.spec->id) ? w.applied_seq[f.spec->id] : 0;
  bool in_round = false;
  for (const auto& c : f.contributors) in_round |= c.worker == w.id && c.seq == h.seq();
  for (const auto& c : f.unacked) in_round |= c.worker == w.id && c.seq == h.seq();
  if (h.seq() <= applied || in_round) {
    ++counters_.pushes_duplicate;
    ack.header.ack = in_round ? AckStatus::Queued : AckStatus::Duplicate;
    out->push_back(std::move(ack));
    return;
  }
  for (const auto& c : f.contributors)
    if (c.worker == w.id)
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
  auto codec = kernels::Codec{static_cast<kernels::CodecKind>(h.codec()), h.block()};
  if (auto s = kernels::ValidateCodec(codec); !s.ok())
    return Refuse(rid, WireError(ErrorCode::BadCodec, s.message()), &h, out);
  if (auto s = wire::CheckEncodedPayload(m, codec, f.spec->numel); !s.ok())
    return Refuse(rid, s, &h, out);
  if (h.tokens() == 0 || h.steps() == 0)
    return Refuse(rid, WireError(ErrorCode::Malformed, "push without tokens or steps"), &h, out);

  double wgt = PushWeight(opt_.weights, h.tokens(), h.steps(), staleness, opt_.staleness_alpha);
  // What this worker brings to a round of this fragment, undiscounted: a round it misses
  // counts it as a zero delta of this weight (RoundNorm::kExpected).
  PushRate& rate = w.push_rate[f.spec->id];
  rate.weight = Ema(rate.weight, PushWeight(opt_.weights, h.tokens(), h.steps(), 0, 0));
  if (const absl::Time now = clock_->Now(); now > rate.last) {
    if (rate.last != absl::InfinitePast())
      rate.interval_s = Ema(rate.interval_s, absl::ToDoubleSeconds(now - rate.last));
    rate.last = now;
  }
  if (f.weight_ref == 0) f.weight_ref = wgt;
  const float rel = static_cast<float>(wgt / f.weight_ref);
  const bool drop = opt_.test_drop_pushes > 0 &&
                    std::uniform_real_distribution<double>(0, 1)(drop_rng_) < opt_.test_drop_pushes;
  // Weighted mean: accumulate in place, in the pooled buffer the round holds while open.
  if (!f.acc_buf && opt_.merge != MergeRule::kRda && !drop)
    f.acc_buf = pool_.Take(f.spec->numel * sizeof(float));
  float* target = f.acc_buf ? f.acc().data() : nullptr;
  if (opt_.merge == MergeRule::kRda && !drop) {  // RDA: keep this push's delta whole
    f.rda_deltas.emplace_back(f.spec->numel, 0.0f);
    f.rda_weights.push_back(rel);
    target = f.rda_deltas.back().data();
  }
  const float scale = opt_.merge == MergeRule::kRda ? 1.0f : rel;
  // The round's first merged push overwrites: no zeroing pass needed.
  const bool overwrite = opt_.merge == MergeRule::kRda || f.merged == 0;
  // Decode and merge on the fragment's apply thread; the payload frames move there, uncopied.
  auto msg = std::make_shared<wire::Message>(std::move(m));
  FragmentState* fs = &f;
  if (drop) {
    ++counters_.pushes_dropped;
  } else {
    apply_->Submit(f.spec->id, [msg, fs, target, codec, scale, overwrite] {
      const absl::Time t0 = absl::Now();
      for (const wire::PayloadChunk& c : wire::PayloadLayout(codec, fs->spec->numel)) {
        std::span<float> dst(target + c.offset, c.count);
        auto st = overwrite ? kernels::Decode(codec, msg->payload(c.index), dst)
                            : kernels::DecodeAccumulate(codec, msg->payload(c.index), scale, dst);
        if (!st.ok()) fs->apply_errors.fetch_add(1);  // unreachable after CheckEncodedPayload
      }
      fs->last_apply_ns.store(absl::ToInt64Nanoseconds(absl::Now() - t0));
    });
    ++f.merged;
    f.weight_sum += rel;
  }
  const absl::Time now = clock_->Now();
  if (f.round.pushes == 0) f.round.opened = now;
  ++f.round.pushes;
  if (f.round.pushes == opt_.round.quorum) {
    f.round.quorum_reached = now;
    timings_.time_to_quorum_s =
        Ema(timings_.time_to_quorum_s, absl::ToDoubleSeconds(now - f.round.opened));
  }
  const uint64_t bytes = msg->payload_bytes();
  f.contributors.push_back({rid, w.id, w.generation, h.seq(), bytes, h.base_version()});
  counters_.max_held_bytes = std::max(counters_.max_held_bytes, held + bytes);
  timings_.inner_steps = Ema(timings_.inner_steps, h.steps());
  if (h.step_time_us() > 0) w.step_time_us = h.step_time_us();  // the worker's own average
  ++counters_.pushes_queued;
  ++counters_.staleness_hist[StalenessBucket(staleness)];
  counters_.staleness_sum += staleness;
  ack.header.ack = AckStatus::Queued;
  ack.header.round = counters_.rounds;
  out->push_back(std::move(ack));
  // Per-arrival mode: Tick publishes (after the checkpoint if due); a fragment whose theta is
  // being written takes this push in the round Tick closes after the write.
  if (f.dn && !f.writing) CloseRound(f);
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
  WorkerInfo& w = *workers_.at(h.worker_id());
  if (h.step_time_us() > 0) w.step_time_us = h.step_time_us();
  Outgoing o{rid, Reply(MsgType::Heartbeat), {}};
  o.header.worker_id = w.id;
  for (uint32_t id : owned_) o.header.versions.emplace_back(id, fragments_.at(id)->published);
  o.header.fleet_step_time_us = static_cast<uint64_t>(FleetStepTimeUs());
  out->push_back(std::move(o));
}

void Shard::FillUpdate(FragmentState& f, uint32_t worker, uint64_t base, Outgoing* o) {
  o->header.fragment_id = f.spec->id;
  o->header.version = f.published;
  o->values_checksums = f.snapshot_sums;
  if (auto w = workers_.find(worker); w != workers_.end()) {
    uint64_t& holds = w->second->holds[f.spec->id];
    holds = std::max(holds, f.published);
  }
  const auto chain = f.downloads && base > 0 ? f.downloads->Between(base, f.published)
                                             : std::vector<const DownloadUpdate*>{};
  if (chain.empty()) {
    wire::SetPayloadLayout(o->header, wire::kFragmentCodec, f.spec->numel);
    o->payloads = wire::PayloadFrames(f.snapshot, wire::kFragmentCodec, f.spec->numel);
    o->checksums = f.snapshot_sums;
    ++counters_.updates_full;
    counters_.update_bytes_full += f.spec->numel * sizeof(float);
    return;
  }
  // U_{base+1} .. U_published, each cut in chunks as a push is: the worker reconstructs them in
  // turn on the values of `base` and checks the result against values_checksum.
  const kernels::Codec codec = f.downloads->codec();
  wire::SetPayloadLayout(o->header, codec, f.spec->numel);
  o->header.base_version = base;
  o->header.values_checksum = chain.back()->values_checksum;
  auto sums = std::make_shared<std::vector<uint64_t>>();
  for (const DownloadUpdate* u : chain) {
    for (auto& frame : wire::PayloadFrames(u->bytes, codec, f.spec->numel))
      o->payloads.push_back(std::move(frame));
    sums->insert(sums->end(), u->sums->begin(), u->sums->end());
  }
  o->checksums = std::move(sums);
  ++counters_.updates_delta;
  counters_.update_bytes_delta += chain.size() * f.downloads->update_bytes();
}

void Shard::QuantizeDownload(FragmentState& f, std::span<const float> previous) {
  if (!f.downloads->Quantize(f.version + 1, previous, f.theta(), step_scratch_))
    log_lines_.push_back(absl::StrCat("fragment ", f.spec->id, " version ", f.version + 1,
                                      " is not finite: published whole, not as an update"));
}

void Shard::TrimDownloads(FragmentState& f) {
  if (!f.downloads) return;
  // The oldest version a live worker that took this fragment holds (a worker that took none
  // from this shard gets it whole): updates up to it are no one's to use.
  const absl::Time now = clock_->Now();
  uint64_t oldest = f.published;
  for (const auto& [_, w] : workers_) {
    if (now - w->last_seen > opt_.worker_timeout) continue;
    if (auto h = w->holds.find(f.spec->id); h != w->holds.end())
      oldest = std::min(oldest, h->second);
  }
  f.downloads->Trim(oldest, opt_.download_chain);
}

uint32_t Shard::LiveMissing(const FragmentState& f) const {
  const absl::Time now = clock_->Now();
  uint32_t missing = 0;
  for (const auto& [id, w] : workers_) {
    if (now - w->last_seen > opt_.worker_timeout) continue;
    bool in = false;
    for (const auto& c : f.contributors) in |= c.worker == id;
    if (!in) ++missing;
  }
  return missing;
}

double Shard::FleetCadenceS(std::optional<uint32_t> fragment) const {
  const absl::Time now = clock_->Now();
  absl::InlinedVector<double, 16> intervals;  // the live workers' known push intervals
  for (const auto& [_, w] : workers_) {
    if (now - w->last_seen > opt_.worker_timeout) continue;
    for (const auto& [id, rate] : w->push_rate)
      if (rate.interval_s > 0 && (!fragment || id == *fragment))
        intervals.push_back(rate.interval_s);
  }
  if (intervals.empty()) return 0;
  auto mid = intervals.begin() + (intervals.size() - 1) / 2;
  std::nth_element(intervals.begin(), mid, intervals.end());
  return *mid;
}

double Shard::ExpectedMissingWeight(const FragmentState& f) const {
  const absl::Time now = clock_->Now();
  const uint32_t id = f.spec->id;
  auto live = [&](const WorkerInfo& w) { return now - w.last_seen <= opt_.worker_timeout; };
  const double cadence = FleetCadenceS(id);
  double missing = 0;
  for (const auto& [wid, w] : workers_) {
    if (!live(*w)) continue;
    auto it = w->push_rate.find(id);
    if (it == w->push_rate.end()) continue;  // never pushed this fragment: nothing expected
    bool in = false;
    for (const auto& c : f.contributors) in |= c.worker == wid;
    if (in) continue;
    const PushRate& r = it->second;
    const double per_round =
        r.interval_s > 0 && cadence > 0 ? std::min(1.0, cadence / r.interval_s) : 1.0;
    missing += r.weight * per_round;
  }
  return missing;
}

uint32_t Shard::live_workers() const {
  const absl::Time now = clock_->Now();
  uint32_t n = 0;
  for (const auto& [_, w] : workers_) n += now - w->last_seen <= opt_.worker_timeout;
  return n;
}

uint64_t Shard::HeldBytes(uint32_t worker, uint64_t generation) const {
  uint64_t n = 0;
  for (const auto& [_, f] : fragments_)
    for (const auto& c : f->contributors)
      if (c.worker == worker && c.generation == generation) n += c.bytes;
  return n;
}

// The fastest live worker's moving-average step time (DyLU's v_max), 0 when unknown. A dead
// worker does not count: its last figure would hold everyone's H_w down forever.
double Shard::FleetStepTimeUs() const {
  const absl::Time now = clock_->Now();
  double fleet = 0;
  for (const auto& [_, w] : workers_)
    if (w->step_time_us > 0 && now - w->last_seen <= opt_.worker_timeout)
      fleet = fleet == 0 ? w->step_time_us : std::min(fleet, w->step_time_us);
  return fleet;
}

absl::Duration Shard::Grace() const {
  RoundTimings t = timings_;
  t.step_time_s = FleetStepTimeUs() * 1e-6;
  t.cycle_s = FleetCadenceS(std::nullopt);
  return GraceWindow(opt_.round, t);
}

void Shard::CloseRound(FragmentState& f) {
  apply_->Wait(f.spec->id);  // every push of the round is merged
  counters_.last_apply_ms = f.last_apply_ns.load() / 1e6;
  counters_.apply_errors += f.apply_errors.exchange(0);
  // The merged weight over what a full round would weigh: with kExpected a live worker missing
  // from the round counts as a zero delta. A dropped push (test flag) counts as neither: the
  // round is the mean of the pushes that survived, as in DiLoCo's dropped-gradient study.
  double total = f.weight_sum;
  if (!f.dn && opt_.norm == RoundNorm::kExpected && f.weight_ref > 0)
    total += ExpectedMissingWeight(f) / f.weight_ref;
  const double share = f.merged > 0 ? f.weight_sum / total : 0;
  counters_.round_share = counters_.rounds == 0 ? share : Ema(counters_.round_share, share, 0.05);
  if (opt_.merge == MergeRule::kRda) {
    if (!f.acc_buf) f.acc_buf = pool_.Take(f.spec->numel * sizeof(float));  // RdaMerge's output
    std::vector<std::span<const float>> deltas(f.rda_deltas.begin(), f.rda_deltas.end());
    auto s = kernels::RdaMerge(deltas, f.rda_weights, f.acc());
    if (!s.ok()) std::fill(f.acc().begin(), f.acc().end(), 0.0f);  // all-zero weights: no move
    f.rda_deltas.clear();
    f.rda_weights.clear();
    if (share != 1.0)
      for (float& a : f.acc()) a *= static_cast<float>(share);
  } else if (const double inv = f.merged > 0 ? share / f.weight_sum : 1.0; inv != 1.0) {
    for (float& a : f.acc()) a *= static_cast<float>(inv);
  }
  // Quantized downloads: the published values P_{v-1} stay as they are (holding them makes the
  // step write a new theta) until the update to the new version is taken from them.
  std::shared_ptr<wire::Bytes> previous;
  if (f.downloads) previous = f.theta_buf;
  if (f.merged == 0) {
    // Every push of the round was dropped: nothing to step on; the version still moves so that
    // the contributors' pushes are answered (with quantized downloads: the residual's update).
    if (f.downloads) MakeThetaWritable(f);
  } else if (f.dn) {
    MakeThetaWritable(f);
    (void)f.dn->Arrive(f.theta(), f.momentum, f.acc());  // sizes match by construction
  } else {
    StepRound(f, share);
  }
  if (previous) {
    QuantizeDownload(f, Floats(*previous));
    previous.reset();
    BudgetPool();  // the chain grew: what the pool may keep shrinks before it takes buffers back
  }
  // The round is closed: its accumulator goes back.
  pool_.Give(std::move(f.acc_buf), clock_->Now());
  ++f.version;
  ++counters_.rounds;
  for (const auto& c : f.contributors) {
    auto& w = *workers_.at(c.worker);
    if (w.generation == c.generation) w.applied_seq[f.spec->id] = c.seq;
    f.unacked.push_back(c);
  }
  f.contributors.clear();
  f.round = OpenRound{};
  f.weight_sum = f.weight_ref = 0;
  f.merged = 0;
  dirty_ = true;
}

void Shard::StepRound(FragmentState& f, double share) {
  auto step = [&](std::span<float> theta, std::span<float> m, std::span<const float> d,
                  double* phase) {
    if (opt_.step == RoundStep::kPartial) {
      (void)kernels::PartialNesterovStep(opt_.outer, share, theta, m, d);
    } else if (opt_.step == RoundStep::kComposed) {
      (void)kernels::ComposedNesterovStep(opt_.outer, share, phase, theta, m, d);
    } else {
      kernels::NesterovStep(opt_.outer, theta, m, d);
    }
  };
  if (f.theta_buf.use_count() == 1) {  // neither published nor being sent: step in place
    step(f.theta(), f.momentum, f.acc(), &f.phase);
    return;
  }
  // The accumulator becomes the new theta: chunk by chunk, its delta moves to a scratch buffer,
  // the old theta's values take its place and the step runs there. The steps are elementwise
  // (the phase is the same for every chunk), so the result is the in-place step's, bit for bit.
  const std::span<const float> old = f.theta();
  const std::span<float> out = f.acc();
  const std::span<float> m = f.momentum;
  constexpr size_t kChunk = size_t{1} << 18;  // 1 MiB of floats: large enough for ParallelFor
  step_scratch_.resize(std::min(kChunk, out.size()));
  double phase = f.phase;
  for (size_t lo = 0; lo < out.size(); lo += kChunk) {
    const size_t n = std::min(kChunk, out.size() - lo);
    const std::span<float> d(step_scratch_.data(), n);
    std::copy_n(out.begin() + lo, n, d.begin());
    std::copy_n(old.begin() + lo, n, out.begin() + lo);
    phase = f.phase;
    step(out.subspan(lo, n), m.subspan(lo, n), d, &phase);
  }
  f.phase = phase;
  // The old theta is reused once no send or snapshot holds it.
  pool_.Give(std::exchange(f.theta_buf, std::move(f.acc_buf)), clock_->Now());
}

void Shard::MakeThetaWritable(FragmentState& f) {
  if (f.theta_buf.use_count() == 1) return;  // neither published nor being sent
  auto copy = pool_.Take(f.theta_buf->size());
  std::memcpy(copy->data(), f.theta_buf->data(), copy->size());
  // The old theta is reused once no send or snapshot holds it.
  pool_.Give(std::exchange(f.theta_buf, std::move(copy)), clock_->Now());
}

void Shard::Publish(FragmentState& f, std::vector<Outgoing>* out) {
  // No copy: the snapshot is the live theta, which the next round copies before changing it.
  f.snapshot = f.theta_buf;
  f.snapshot_sums = SnapshotChecksums(*f.snapshot);
  f.published = f.version;
  for (const auto& c : f.unacked) {
    Outgoing o{c.rid, Reply(MsgType::FragmentUpdate), {}};
    FillUpdate(f, c.worker, c.base, &o);
    o.header.worker_id = c.worker;
    o.header.generation = c.generation;
    o.header.seq = c.seq;
    o.header.ack = AckStatus::Applied;
    out->push_back(std::move(o));
  }
  f.unacked.clear();
  TrimDownloads(f);
}

uint64_t Shard::DownloadBytes() const {
  uint64_t bytes = 0;  // residuals and kept updates
  for (uint32_t id : owned_)
    if (const auto& d = fragments_.at(id)->downloads) bytes += d->bytes();
  return bytes;
}

void Shard::BudgetPool() {
  const uint64_t downloads = DownloadBytes();
  pool_.SetBudget(round_buffer_bytes_ > downloads ? round_buffer_bytes_ - downloads : 0);
}

void Shard::Tick(std::vector<Outgoing>* out) {
  const absl::Time now = clock_->Now();
  trains_.DropIdleSince(now - kTrainIdle);
  BudgetPool();
  pool_.Trim(now);
  if (writer_) {
    if (auto r = writer_->TakeResult()) {
      FinishCheckpoint(*r);
      PublishReady(out);  // before a round closes on the theta that was just made durable
    }
  }
  const absl::Duration grace = Grace();
  // Due rounds close in turn from where the last call stopped, within opt_.close_budget, so a
  // pass of the event loop, and with it the answer to every heartbeat, stays short at real
  // sizes. A round left due keeps NextDeadline() in the past: the loop comes straight back.
  const size_t n = owned_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t at = (close_cursor_ + k) % n;
    FragmentState& f = *fragments_.at(owned_[at]);
    f.round.live_workers_missing = LiveMissing(f);
    if (f.writing) continue;  // its theta is being written: the round closes after the write
    // Delayed Nesterov has no rounds: every arrival is applied on its own.
    const bool due = f.dn ? f.round.pushes > 0 : ShouldClose(opt_.round, grace, f.round, now);
    if (!due) continue;
    CloseRound(f);
    if (clock_->Now() - now >= opt_.close_budget) {
      close_cursor_ = (at + 1) % n;
      break;
    }
  }
  MaybeStartCheckpoint(now);
  PublishReady(out);
}

bool Shard::Publishable(const FragmentState& f) const {
  if (f.published == f.version) return false;
  if (!store_) return true;
  if (f.published == 0) return f.durable >= 1;  // theta(0) durable in every mode
  if (opt_.durability == Durability::kPerRound) return f.durable == f.version;
  return true;
}

void Shard::PublishReady(std::vector<Outgoing>* out) {
  for (uint32_t id : owned_) {
    FragmentState& f = *fragments_.at(id);
    if (!Publishable(f)) continue;
    Publish(f, out);
    for (auto& a : f.init_acks) {
      a.header.version = f.published;
      out->push_back(std::move(a));
    }
    f.init_acks.clear();
  }
}

void Shard::MaybeStartCheckpoint(absl::Time now) {
  if (!store_ || writer_->busy() || !dirty_ || now < next_checkpoint_retry_) return;
  bool init = false, changed = false;
  for (uint32_t id : owned_) {
    const FragmentState& f = *fragments_.at(id);
    init |= f.version > 0 && f.durable == 0;
    changed |= f.version != f.durable;
  }
  const bool per_round = opt_.durability == Durability::kPerRound;
  const bool due = init || (per_round && changed) ||
                   counters_.rounds - rounds_at_checkpoint_ >= opt_.checkpoint_every_rounds ||
                   now - last_checkpoint_time_ >= opt_.checkpoint_interval;
  if (!due) return;
  StartCheckpoint(per_round || init);
  if (auto r = writer_->TakeResult()) FinishCheckpoint(*r);  // written inline
}

void Shard::StartCheckpoint(bool sync) {
  CheckpointWriter::Job job;
  job.id = checkpoint_id_ + 1;
  job.rounds = counters_.rounds;
  job.optimizer = {opt_.outer.lr, opt_.outer.mu};
  job.sync = sync;
  in_flight_.rounds = counters_.rounds;
  in_flight_.versions.clear();
  for (uint32_t id : owned_) {
    FragmentState& f = *fragments_.at(id);
    in_flight_.versions.emplace_back(id, f.version);
    // Incremental: a fragment the newest checkpoint holds at this version is named, not
    // written (the store reads only the spans' length), and stays free to close its next round.
    if (f.version == f.durable) {
      job.fragments.push_back({id, f.version, f.theta(), f.momentum, /*unchanged=*/true});
      continue;
    }
    job.fragments.push_back({id, f.version, f.theta(), f.momentum});
    f.writing = true;
  }
  for (const auto& [id, w] : workers_)
    for (const auto& [frag, seq] : w->applied_seq)
      job.dedup.push_back({id, frag, w->generation, seq});
  std::sort(job.dedup.begin(), job.dedup.end(), [](const auto& a, const auto& b) {
    return std::tie(a.worker_id, a.fragment_id) < std::tie(b.worker_id, b.fragment_id);
  });
  dirty_ = false;  // what changes from here on goes into the next checkpoint
  writer_->Submit(std::move(job));
}

void Shard::FinishCheckpoint(const CheckpointWriter::Result& r) {
  for (const auto& [id, version] : in_flight_.versions) {
    FragmentState& f = *fragments_.at(id);
    f.writing = false;
    if (r.status.ok()) f.durable = version;
  }
  if (!r.status.ok()) {
    ++counters_.checkpoint_failures;
    ++failures_in_a_row_;
    next_checkpoint_retry_ = clock_->Now() + opt_.checkpoint_retry;
    dirty_ = true;
    // The operator hears of a failure once per cause, not once per retry.
    const std::string cause(r.status.message());
    if (cause != counters_.checkpoint_error)
      log_lines_.push_back(absl::StrCat(
          "checkpoint ", r.id, " failed (", absl::StatusCodeToString(r.status.code()), "): ", cause,
          "; retrying every ", absl::FormatDuration(opt_.checkpoint_retry),
          opt_.durability == Durability::kPerRound ? ", new versions wait for it" : ""));
    counters_.checkpoint_error = cause;
    counters_.checkpoint_error_code = absl::StatusCodeToString(r.status.code());
    return;
  }
  if (failures_in_a_row_ > 0)
    log_lines_.push_back(absl::StrCat("checkpoint ", r.id, " written after ", failures_in_a_row_,
                                      " failed attempts"));
  failures_in_a_row_ = 0;
  counters_.checkpoint_error.clear();
  counters_.checkpoint_error_code.clear();
  checkpoint_id_ = r.id;
  ++counters_.checkpoints;
  rounds_at_checkpoint_ = in_flight_.rounds;
  last_checkpoint_time_ = clock_->Now();
  counters_.last_checkpoint_ms = r.write_ms;
  counters_.last_checkpoint_bytes = r.bytes;
  counters_.checkpoint_bytes_total += r.bytes;
  counters_.checkpoint_ms_total += r.write_ms;
}

absl::Time Shard::NextDeadline() const {
  absl::Time t = absl::InfiniteFuture();
  const absl::Duration grace = Grace();
  bool unpublished = false;
  for (uint32_t id : owned_) {
    const auto& f = *fragments_.at(id);
    if (!f.writing) t = std::min(t, CloseDeadline(opt_.round, grace, f.round));
    unpublished |= f.published != f.version;
  }
  // A write in flight wakes the loop through checkpoint_wake_fd().
  if (store_ && !writer_->busy()) {
    if (unpublished) t = std::min(t, next_checkpoint_retry_);
    if (dirty_) t = std::min(t, last_checkpoint_time_ + opt_.checkpoint_interval);
  }
  return t;
}

absl::Status Shard::CheckpointNow() {
  if (!store_) return absl::OkStatus();
  if (auto r = writer_->WaitResult()) FinishCheckpoint(*r);
  StartCheckpoint(true);
  auto r = writer_->WaitResult();
  FinishCheckpoint(*r);
  return r->status;
}

void Shard::AwaitCheckpoint() {
  if (writer_) writer_->WaitDone();
}

int Shard::checkpoint_wake_fd() const { return writer_ ? writer_->wake_fd() : -1; }

uint64_t Shard::published_version(uint32_t fragment) const {
  auto it = fragments_.find(fragment);
  return it == fragments_.end() ? 0 : it->second->published;
}

std::shared_ptr<const std::vector<uint64_t>> Shard::published_checksums(uint32_t fragment) const {
  auto it = fragments_.find(fragment);
  return it == fragments_.end() ? nullptr : it->second->snapshot_sums;
}

std::vector<float> Shard::params(uint32_t fragment) const {
  auto it = fragments_.find(fragment);
  if (it == fragments_.end()) return {};
  const auto t = it->second->theta();
  return {t.begin(), t.end()};
}

std::string RefusalsText(const ShardCounters& c, absl::string_view before,
                         absl::string_view between, absl::string_view separator) {
  std::string t;
  for (size_t i = 1; i < kErrorCodes; ++i) {
    if (c.refused_by_reason[i] == 0) continue;
    if (!t.empty()) absl::StrAppend(&t, separator);
    absl::StrAppend(&t, before, wire::EnumNameErrorCode(static_cast<ErrorCode>(i)), between,
                    c.refused_by_reason[i]);
  }
  return t;
}

std::string Shard::StatsJson() const {
  std::string versions, durable;
  const uint64_t download_bytes = DownloadBytes();  // quantized downloads' residuals and updates
  for (uint32_t id : owned_) {
    absl::StrAppend(&versions, versions.empty() ? "" : ",", "\"", id,
                    "\":", fragments_.at(id)->published);
    absl::StrAppend(&durable, durable.empty() ? "" : ",", "\"", id,
                    "\":", fragments_.at(id)->durable);
  }
  const ProcessMemory mem = ReadProcessMemory().value_or(ProcessMemory{});
  const auto& c = counters_;
  return absl::StrCat(
      "{\"shard\":", opt_.shard, ",\"incarnation\":", incarnation_, ",", CounterJsonMembers(c),
      ",\"versions\":{", versions, "},\"max_held_bytes\":", c.max_held_bytes,
      ",\"trains_cut\":", trains_.trains_cut(), ",\"partial_trains\":", trains_.partial_trains(),
      ",\"store_rollback\":", store_ && !store_->rollback().empty() ? "true" : "false",
      ",\"round_share\":", absl::StrFormat("%.4f", c.round_share),
      ",\"checkpoint_error\":", JsonString(c.checkpoint_error),
      ",\"checkpoint_ms\":", absl::StrFormat("%.1f", c.checkpoint_ms_total), ",\"durable\":{",
      durable, "},\"params\":", owned_params_, ",\"resident_bytes\":", mem.resident_bytes,
      ",\"peak_resident_bytes\":", mem.peak_resident_bytes,
      ",\"pool_fresh_buffers\":", pool_.fresh_allocations(),
      ",\"pool_kept_bytes\":", pool_.kept_bytes(), ",\"pool_budget_bytes\":", pool_.budget(),
      ",\"download_bytes\":", download_bytes,
      ",\"download_codec\":\"", kernels::CodecName(opt_.download),
      "\",\"workers\":", workers_.size(), ",\"refused_by_reason\":{",
      RefusalsText(c, "\"", "\":", ","), "}}");
}

}  // namespace diloco::server
