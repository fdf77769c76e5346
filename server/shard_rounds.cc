// Shard, rounds (server/shard_internal.h): closing a round, its outer step, the quantized
// download of the new version, publication and the answers it releases, and Tick.
#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "kernels/codec.h"
#include "server/shard_internal.h"

namespace diloco::server {

std::shared_ptr<const std::vector<uint64_t>> SnapshotChecksums(const wire::Bytes& b) {
  auto sums = std::make_shared<std::vector<uint64_t>>();
  for (const wire::PayloadChunk& c : wire::PayloadLayout(wire::kFragmentCodec, b.size() / 4))
    sums->push_back(Checksum64(b.data() + c.byte_offset, c.bytes));
  return sums;
}

void Shard::FillUpdate(FragmentState& f, uint32_t worker, uint64_t base, uint64_t keyframe,
                       Outgoing* o) {
  o->header.fragment_id = f.spec->id;
  o->header.version = f.published;
  o->values_checksums = f.snapshot_sums;
  if (WorkerInfo* w = workers_.Find(worker)) {
    uint64_t& holds = w->holds[f.spec->id];
    holds = std::max(holds, f.published);
  }
  std::vector<const DownloadUpdate*> chain;
  const bool keyed = f.downloads && f.downloads->every() > 1;
  if (f.downloads && base > 0) chain = f.downloads->Between(base, f.published);
  if (keyed && chain.empty() && keyframe > 0 && keyframe < base) {
    chain = f.downloads->Between(keyframe, f.published);
    base = keyframe;
  }
  // A worker that does not say its keyframe reads a chain as one update per version.
  if (keyed && keyframe == 0 && chain.size() != f.published - base) chain.clear();
  if (chain.empty()) {
    // The worker's next download is an update from these values.
    if (keyed)
      f.downloads->MarkKeyframe(f.published, Floats(*f.snapshot), f.published == f.version);
    wire::SetPayloadLayout(o->header, wire::kFragmentCodec, f.spec->numel);
    o->payloads = wire::PayloadFrames(f.snapshot, wire::kFragmentCodec, f.spec->numel);
    o->checksums = f.snapshot_sums;
    ++counters_.updates_full;
    counters_.update_bytes_full += f.spec->numel * sizeof(float);
    return;
  }
  // U_{base+1} .. U_published (with keyframes: those of the keyframes after `base`, then the
  // published version's), each cut in chunks as a push is: the worker reconstructs them in turn
  // on the values of `base` and checks the result against values_checksum.
  const kernels::Codec codec = f.downloads->codec();
  wire::SetPayloadLayout(o->header, codec, f.spec->numel);
  o->header.base_version = base;
  if (keyed) {
    const DownloadUpdate& last = *chain.back();
    o->header.chain_updates = static_cast<uint32_t>(chain.size());
    o->header.keyframe_version = last.keyframe ? last.version : last.base;
  }
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
  // Every live worker that took this fragment holds the published version: no one is behind
  // the others, so the new version is a keyframe (server/download_chain.h). Published, not the
  // version before this one: with durability a version is published only once durable, and the
  // workers of a lockstep fleet then take the versions since in one chain, as without keyframes.
  const bool caught_up = workers_.OldestHeld(clock_->Now(), f.spec->id, f.published) >= f.published;
  if (!f.downloads->Quantize(f.version + 1, previous, f.theta(), step_scratch_, caught_up))
    log_lines_.push_back(absl::StrCat("fragment ", f.spec->id, " version ", f.version + 1,
                                      " is not finite: published whole, not as an update"));
}

void Shard::TrimDownloads(FragmentState& f) {
  if (!f.downloads) return;
  // The oldest version a live worker that took this fragment holds (a worker that took none
  // from this shard gets it whole): updates up to it are no one's to use.
  f.downloads->Trim(workers_.OldestHeld(clock_->Now(), f.spec->id, f.published), f.published,
                    opt_.download_chain);
}

uint32_t Shard::live_workers() const { return workers_.LiveCount(clock_->Now()); }

uint64_t Shard::HeldBytes(uint32_t worker, uint64_t generation) const {
  uint64_t n = 0;
  for (const auto& [_, f] : fragments_)
    for (const auto& c : f->contributors)
      if (c.worker == worker && c.generation == generation) n += c.bytes;
  return n;
}

absl::Duration Shard::Grace() const {
  RoundTimings t = timings_;
  t.step_time_s = workers_.FleetStepTimeUs(clock_->Now()) * 1e-6;
  t.cycle_s = workers_.FleetCadenceS(clock_->Now(), std::nullopt);
  return GraceWindow(opt_.round, t);
}

Shard::RoundLane& Shard::LaneOf(FragmentState& f, const kernels::Codec& codec) {
  return f.sparse.outer && kernels::IsTopK(codec.kind) ? f.sparse : f.dense;
}

void Shard::MergePush(FragmentState& f, const HeldPush& p) {
  // Weights are relative to the round's first merged push (kept near 1 in float).
  if (f.weight_ref == 0) f.weight_ref = p.weight;
  const float rel = static_cast<float>(p.weight / f.weight_ref);
  RoundLane& lane = LaneOf(f, p.codec);
  const RoundMerge::Target t = lane.merge->Admit(rel, lane.merged == 0, lane.acc_buf, pool_);
  // Decoded and merged on the fragment's apply thread, where the merge rule says; the norm cap
  // (server/push_guard.h) measures and clips the delta there.
  FragmentState* fs = &f;
  apply_->Submit(f.spec->id, [msg = p.msg, fs, t, codec = p.codec, worker = p.worker, seq = p.seq] {
    thread_local std::vector<float> scratch;  // one payload chunk
    const absl::Time t0 = absl::Now();
    const GuardedDecode d = DecodeGuarded(codec, *msg, fs->spec->numel, t, &fs->norm_cap, scratch);
    if (!d.ok) fs->apply_errors.fetch_add(1);  // unreachable after CheckEncodedPayload
    if (d.admitted.capped) fs->norm_clips.push_back({worker, seq, d.norm, d.admitted.value});
    fs->last_apply_ns.store(absl::ToInt64Nanoseconds(absl::Now() - t0));
  });
  ++lane.merged;
  lane.weight_sum += rel;
}

void Shard::MergeHeld(FragmentState& f) {
  // In an order that does not depend on their arrival (a worker has one push per fragment in a
  // round; a restarted one's new generation may sit beside its old one's).
  std::sort(f.held.begin(), f.held.end(), [](const HeldPush& a, const HeldPush& b) {
    return std::tie(a.worker, a.generation, a.seq) < std::tie(b.worker, b.generation, b.seq);
  });
  for (const HeldPush& p : f.held) MergePush(f, p);
  f.held.clear();
}

void Shard::CloseRound(FragmentState& f) {
  MergeHeld(f);              // MergeOrder::kWorker: the round's pushes go into the merge now
  apply_->Wait(f.spec->id);  // every push of the round is merged
  counters_.last_apply_ms = f.last_apply_ns.load() / 1e6;
  counters_.apply_errors += f.apply_errors.exchange(0);
  CountNormClips(f);
  // The merged weight over what a full round would weigh: with kExpected a live worker missing
  // from the round counts as a zero delta. A dropped push (test flag) counts as neither: the
  // round is the mean of the pushes that survived, as in DiLoCo's dropped-gradient study. Each
  // lane's share is its part of that weight: its delta is its pushes' sum over the same total.
  const double weight_sum = f.weight_sum();
  double total = weight_sum;
  if (!f.dense.outer->PerArrival() && opt_.norm == RoundNorm::kExpected && f.weight_ref > 0)
    total += workers_.ExpectedMissingWeight(clock_->Now(), f.spec->id, InRound(f)) / f.weight_ref;
  const double share = f.merged() > 0 ? weight_sum / total : 0;
  counters_.round_share = counters_.rounds == 0 ? share : Ema(counters_.round_share, share, 0.05);
  for (RoundLane* lane : {&f.dense, &f.sparse})
    if (lane->merged > 0)
      lane->merge->Close(lane->weight_sum / total, lane->weight_sum, lane->merged, lane->acc_buf,
                         pool_);
  // Quantized downloads: the published values P_{v-1} stay as they are (holding them makes the
  // step write a new theta) until the update to the new version is taken from them.
  std::shared_ptr<wire::Bytes> previous;
  if (f.downloads) previous = f.theta_buf;
  if (f.merged() == 0) {
    // Every push of the round was dropped: nothing to step on; the version still moves so that
    // the contributors' pushes are answered (with quantized downloads: the residual's update).
    if (f.downloads) MakeThetaWritable(f);
  }
  // The dense pushes' step first (it owns the momentum), then the top-k pushes' on its result.
  for (RoundLane* lane : {&f.dense, &f.sparse})
    if (lane->merged > 0) StepRound(f, *lane, lane->weight_sum / total);
  if (previous) {
    QuantizeDownload(f, Floats(*previous));
    previous.reset();
    BudgetPool();  // the chain grew: what the pool may keep shrinks before it takes buffers back
  }
  // The round is closed: its accumulators go back.
  for (RoundLane* lane : {&f.dense, &f.sparse})
    if (lane->acc_buf) pool_.Give(std::move(lane->acc_buf), clock_->Now());
  ++f.version;
  ++counters_.rounds;
  for (const auto& c : f.contributors) {
    auto& w = workers_.Get(c.worker);
    if (w.generation == c.generation) {
      w.applied_seq[f.spec->id] = c.seq;
      w.last_applied = clock_->Now();
    }
    f.unacked.push_back(c);
  }
  f.contributors.clear();
  f.round = OpenRound{};
  for (RoundLane* lane : {&f.dense, &f.sparse}) {
    lane->weight_sum = 0;
    lane->merged = 0;
  }
  f.weight_ref = 0;
  dirty_ = true;
}

void Shard::StepRound(FragmentState& f, RoundLane& lane, double share) {
  OuterStep& outer = *lane.outer;
  if (f.theta_buf.use_count() == 1 || !outer.Splits()) {
    // Neither published nor being sent (nor stepped by another lane this round): step in place.
    // A step taken whole only (Delayed Nesterov) on a theta still sent steps in a copy of it.
    MakeThetaWritable(f);
    outer.Step(share, f.theta(), f.momentum, lane.acc());
    return;
  }
  // The accumulator becomes the new theta: chunk by chunk, its delta moves to a scratch buffer,
  // the old theta's values take its place and the step runs there. The steps are elementwise
  // (every chunk steps from the state the round found, OuterStep::StepPart; Commit advances it
  // once), so the result is the in-place step's, bit for bit.
  const std::span<const float> old = f.theta();
  const std::span<float> out = lane.acc();
  const std::span<float> m = f.momentum;
  constexpr size_t kChunk = size_t{1} << 18;  // 1 MiB of floats: large enough for ParallelFor
  step_scratch_.resize(std::min(kChunk, out.size()));
  for (size_t lo = 0; lo < out.size(); lo += kChunk) {
    const size_t n = std::min(kChunk, out.size() - lo);
    const std::span<float> d(step_scratch_.data(), n);
    std::copy_n(out.begin() + lo, n, d.begin());
    std::copy_n(old.begin() + lo, n, out.begin() + lo);
    outer.StepPart(share, out.subspan(lo, n), m.subspan(lo, n), d);
  }
  outer.Commit();
  // The old theta is reused once no send or snapshot holds it.
  pool_.Give(std::exchange(f.theta_buf, std::move(lane.acc_buf)), clock_->Now());
}

void Shard::MakeThetaWritable(FragmentState& f) {
  if (f.theta_buf.use_count() == 1) return;  // neither published nor being sent
  auto copy = pool_.Take(f.theta_buf->size());
  std::memcpy(copy->data(), f.theta_buf->data(), copy->size());
  // The old theta is reused once no send or snapshot holds it.
  pool_.Give(std::exchange(f.theta_buf, std::move(copy)), clock_->Now());
}

void Shard::Publish(FragmentState& f, std::vector<Outgoing>* out) {
  const absl::Time now = clock_->Now();
  // No copy: the snapshot is the live theta, which the next round copies before changing it.
  f.snapshot = f.theta_buf;
  f.snapshot_sums = SnapshotChecksums(*f.snapshot);
  f.published = f.version;
  for (const auto& c : f.unacked) {
    Outgoing o{c.rid, Reply(MsgType::FragmentUpdate), {}};
    FillUpdate(f, c.worker, c.base, c.keyframe, &o);
    o.header.worker_id = c.worker;
    o.header.generation = c.generation;
    o.header.seq = c.seq;
    o.header.ack = AckStatus::Applied;
    o.header.held_us =
        static_cast<uint64_t>(std::max<int64_t>(absl::ToInt64Microseconds(now - c.arrived), 1));
    o.push_steps = c.steps;
    o.push_tokens = c.tokens;
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
  trains_.kept().Expire(now);
  absl::erase_if(cut_trains_, [&](const auto& kv) { return kv.second.at < now - kTrainIdle; });
  BudgetPool();
  pool_.Trim(now);
  if (writer_) {
    if (auto r = writer_->TakeResult()) {
      FinishCheckpoint(*r);
      PublishReady(out);  // before a round closes on the theta that was just made durable
    }
  }
  const absl::Duration grace = Grace();
  const RoundPolicy policy = Round();
  // Due rounds close in turn from where the last call stopped, within opt_.close_budget, so a
  // pass of the event loop, and with it the answer to every heartbeat, stays short at real
  // sizes. A round left due keeps NextDeadline() in the past: the loop comes straight back.
  const size_t n = owned_.size();
  due_.clear();
  for (size_t k = 0; k < n; ++k) {
    const size_t at = (close_cursor_ + k) % n;
    FragmentState& f = *fragments_.at(owned_[at]);
    f.round.live_workers_missing = workers_.LiveMissing(now, InRound(f));
    if (f.writing) continue;  // its theta is being written: the round closes after the write
    // Delayed Nesterov has no rounds: every arrival is applied on its own.
    if (f.dense.outer->PerArrival() ? f.round.pushes > 0 : ShouldClose(policy, grace, f.round, now))
      due_.push_back(at);
  }
  // Held pushes (MergeOrder::kWorker) of every due round go to the apply threads before the
  // first round closes: fragments on different threads are decoded side by side. (A round the
  // budget leaves for the next call merges what arrives meanwhile after these.)
  for (size_t at : due_) MergeHeld(*fragments_.at(owned_[at]));
  for (size_t at : due_) {
    CloseRound(*fragments_.at(owned_[at]));
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

}  // namespace diloco::server
