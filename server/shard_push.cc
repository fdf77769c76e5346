// Shard, push intake (server/shard_internal.h): exactly-once, credit, staleness and payload
// checks, the weight cap, and a push's place in its fragment's open round.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash_uniform.h"
#include "kernels/codec.h"
#include "schema/payload_check.h"
#include "server/shard.h"
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

// TestFaults::drop_pushes: the hash's seed is this, plus the shard, plus drop_seed in the high
// half.
constexpr uint64_t kDropSeed = 0x5EED0000;

}  // namespace

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
  if (auto s = PickOuterStep(f, codec); !s.ok()) return Refuse(rid, s, &h, out);
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
  const TestFaults* faults = opt_.faults.get();
  const bool drop = faults && faults->drop_pushes > 0 &&
                    HashUniform(kDropSeed + opt_.shard + (faults->drop_seed << 32), w.id,
                                f.spec->id, h.seq()) < faults->drop_pushes;
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
  f.contributors.push_back({rid, w.id, w.generation, h.seq(), bytes, h.base_version(), h.tokens(),
                            h.steps(), now, h.keyframe_version()});
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
  if (f.dense.outer->PerArrival() && !f.writing) CloseRound(f);
}

absl::Status Shard::PickOuterStep(FragmentState& f, const kernels::Codec& codec) {
  if (opt_.outer_choice != OuterChoice::kAuto) return absl::OkStatus();
  const bool sparse = kernels::IsTopK(codec.kind);
  if (f.sparse.outer) {
    // Rounds: every push steps as its codec asks (Shard::LaneOf); said once per fragment.
    if (sparse && !f.topk_logged) {
      f.topk_logged = true;
      log_lines_.push_back(absl::StrCat("fragment ", f.spec->id, ": top-k pushes (",
                                        kernels::CodecName(codec), ") take the sparse step (lr ",
                                        opt_.sparse_outer.lr, ", no momentum)"));
    }
    return absl::OkStatus();
  }
  if (!f.sparse_step) {
    // No round of this fragment has closed in this process yet: nothing holds the step.
    f.dense.outer =
        MakeOuterStep(opt_.outer_mode, opt_.step, sparse ? opt_.sparse_outer : opt_.outer,
                      opt_.dn_period, f.spec->numel);
    f.sparse_step = sparse;
    const kernels::NesterovParams& p = sparse ? opt_.sparse_outer : opt_.outer;
    log_lines_.push_back(absl::StrCat(
        "fragment ", f.spec->id, ": outer step ", sparse ? "sparse" : "nesterov", " (lr ", p.lr,
        ", momentum ", p.mu, "), chosen by its first push (", kernels::CodecName(codec), ")"));
    return absl::OkStatus();
  }
  if (*f.sparse_step == sparse) return absl::OkStatus();
  return WireError(
      ErrorCode::BadCodec,
      absl::StrCat("fragment ", f.spec->id, " steps per arrival and takes the ",
                   *f.sparse_step ? "sparse pushes' outer step (its first push was top-k)"
                                  : "dense pushes' outer step (its first push was not top-k)",
                   " and this push is ", kernels::CodecName(codec),
                   ": push one kind of codec to a shard (the workers' --codec) or choose the "
                   "shard's step with --outer_step=nesterov|sparse"));
}

}  // namespace diloco::server
