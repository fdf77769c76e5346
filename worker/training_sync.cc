#include "worker/training_sync.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/ema.h"
#include "kernels/optim.h"
#include "worker/fragment_update.h"

namespace diloco::worker {

TrainingSync::TrainingSync(const SyncOptions& opt, const Plan& plan, SyncShared& shared)
    : opt_(opt),
      plan_(plan),
      shared_(shared),
      extrapolate_(PushExtrapolation(opt)),
      align_(PushAlignment(opt)) {
  anchor_.assign(plan.total_elements(), 0.0f);
  frags_.resize(plan.fragments().size());
  for (uint32_t i = 0; i < frags_.size(); ++i) frags_[i].spec = &plan.fragment(i);
}

void TrainingSync::ReleaseDelta(Fragment& f) {
  if (!f.outstanding && f.delta.data) pool_.Give(std::exchange(f.delta, {}));
}

void TrainingSync::MoveAlongDelta(ParamsFn params, const Fragment& f, float a) {
  const float* d = f.delta.data.get();
  for (const Piece& p : f.spec->pieces) {
    kernels::Axpy(a, std::span<const float>(d, p.length), params(p.flat_offset, p.length));
    d += p.length;
  }
  shared_.Update([&](SyncStats& s) { ++s.local_writes[f.spec->id]; });
}

void TrainingSync::Align(Fragment& f, absl::Duration held) {
  const double step_us = static_cast<double>(shared_.step_time_us());
  if (!align_ || held <= absl::ZeroDuration() || step_us <= 0) return;
  const double steps = std::floor(absl::ToDoubleMicroseconds(held) / step_us);
  f.offset = static_cast<int64_t>(std::min(steps, static_cast<double>(h_ / 2)));
  if (f.offset <= 0) return;  // held for less than a step: the last pusher of its round
  shared_.Update([&](SyncStats& s) {
    ++s.aligned_pushes;
    s.aligned_steps += static_cast<uint64_t>(f.offset);
  });
}

int64_t TrainingSync::carry_bound() const {
  return static_cast<int64_t>(opt_.carry_max) * std::max(opt_.inner_steps, h_);
}

void TrainingSync::Process(ParamsFn params, Arrival& a) {
  Fragment& f = frags_[a.fragment];
  switch (a.kind) {
    case Arrival::kUpdate:
      Adopt(params, a);  // may take the outstanding delta out of the local model first
      ReleaseDelta(f);
      return;
    case Arrival::kDone:
      // The push ended unapplied: its delta is still in (local - anchor) unless an adoption or
      // a re-anchor took it out, so the next push carries its steps and tokens again.
      // An extrapolating worker moved on by (c - 1) x delta at the push: back to where the
      // push left it, so the next push holds this one's work as it was.
      if (f.outstanding && !f.delta_taken && opt_.adopt == SyncOptions::Adopt::kKeep) {
        f.steps += f.pushed_steps;
        f.tokens += f.pushed_tokens;
        if (extrapolate_ != 1.0f) MoveAlongDelta(params, f, extrapolate_ - 1.0f);
      }
      f.outstanding = f.delta_taken = false;
      ReleaseDelta(f);  // the session has undone its error feedback before delivering kDone
      return;
    case Arrival::kReset:
      f.version = f.keyframe = 0;  // the shard may have gone back: adopt whatever it sends next
      return;
    case Arrival::kNeedInit: {
      // An unjoined fragment offers the local values (theta(0) during Join); a joined one the
      // last global values, so a shard that lost its state resumes from the fleet's model.
      auto bytes = std::make_shared<wire::Bytes>(f.spec->numel * sizeof(float));
      if (f.joined) {
        plan_.Gather(*f.spec, anchor_.data(), reinterpret_cast<float*>(bytes->data()));
      } else {
        float* out = reinterpret_cast<float*>(bytes->data());
        for (const Piece& p : f.spec->pieces) {
          const std::span<const float> local = params(p.flat_offset, p.length);
          out = std::copy(local.begin(), local.end(), out);
        }
      }
      shared_.QueueInit(a.fragment, std::move(bytes));
      return;
    }
  }
}

// Takes the arrived global fragment and sets anchor = global. kKeep: local = global + the local
// progress the global values do not hold (local - anchor, plus the outstanding delta when they
// hold this worker's push); kLerp: local = lerp(global, local, alpha). The first adoption (the
// join) always takes the global values, so theta(0) is the same everywhere, and so does a
// fragment whose local work is past the bound. A chain of quantized updates is rebuilt on the
// anchor chunk by chunk (worker/fragment_update.h); one this worker cannot rebuild (it holds an
// older version) is asked for whole instead.
void TrainingSync::Adopt(ParamsFn params, Arrival& a) {
  Fragment& f = frags_[a.fragment];
  const wire::Message& m = *a.message;
  const bool chain = IsUpdateChain(m.header());
  const bool newer = !f.joined || a.version > f.version;
  ChainPlan plan;
  if (chain && newer) {
    auto p = f.joined ? PlanChain(m.header(), f.version, f.keyframe)
                      : absl::FailedPreconditionError("not joined");
    if (!p.ok()) {
      shared_.QueuePull(a.fragment, a.answers_push);
      return;
    }
    plan = *p;
  }
  const bool was_outstanding = f.outstanding;
  if (a.answers_push) {
    f.outstanding = false;
    if (was_outstanding) Align(f, absl::Microseconds(m.header().held_us()));
  }
  if (!newer) {  // nothing newer than what we have
    if (!f.outstanding) f.delta_taken = false;
    return;
  }
  // Local work past the bound (an answer that came late, in steps) is dropped: the fragment
  // takes the global values as they are and counts afresh.
  const bool too_long = f.joined && f.steps > carry_bound();
  const bool keep = f.joined && opt_.adopt == SyncOptions::Adopt::kKeep && !too_long;
  const float alpha = f.joined && !too_long ? opt_.adopt_alpha : 0.0f;
  // The global values hold our push when they answer it, and are assumed to when a push is
  // still outstanding (its answer will not take the delta out a second time).
  const bool take_delta = keep && was_outstanding && !f.delta_taken;
  // Positions of the fragment's own (delta) order map onto its pieces of the flat model.
  auto for_pieces = [&](uint64_t pos, uint64_t n, auto&& fn) {
    uint64_t start = 0;
    for (const Piece& pc : f.spec->pieces) {
      if (n == 0) break;
      if (pos < start + pc.length) {
        const uint64_t in_piece = pos - start, take = std::min(n, pc.length - in_piece);
        fn(pc.flat_offset + in_piece, take, pos);
        pos += take;
        n -= take;
      }
      start += pc.length;
    }
  };
  const float* source =
      plan.source == ChainPlan::Source::kKeyframe ? keyframe_.data() : anchor_.data();
  auto gather = [&](uint64_t pos, std::span<float> out) {
    for_pieces(pos, out.size(), [&](uint64_t flat, uint64_t take, uint64_t at) {
      std::memcpy(out.data() + (at - pos), source + flat, take * sizeof(float));
    });
  };
  if (plan.keep_after >= 0 && keyframe_.empty()) keyframe_.assign(anchor_.size(), 0.0f);
  auto keep_keyframe = [&](uint64_t pos, std::span<const float> values) {
    for_pieces(pos, values.size(), [&](uint64_t flat, uint64_t take, uint64_t at) {
      std::memcpy(keyframe_.data() + flat, values.data() + (at - pos), take * sizeof(float));
    });
  };
  auto consume = [&](uint64_t pos, std::span<const float> values) {
    for_pieces(pos, values.size(), [&](uint64_t flat, uint64_t take, uint64_t at) {
      const std::span<const float> global = values.subspan(at - pos, take);
      const std::span<float> anc(anchor_.data() + flat, take);
      const std::span<float> local = params(flat, take);
      if (keep) {
        kernels::RebaseAdopt(global, anc, local,
                             take_delta ? std::span<const float>(f.delta.data.get() + at, take)
                                        : std::span<const float>(),
                             extrapolate_);
      } else {
        std::memcpy(anc.data(), global.data(), take * sizeof(float));
        kernels::LerpAdopt(anc, local, alpha);
      }
    });
  };
  auto read = ReadFragmentUpdate(m, plan, update_scratch_, gather, consume, keep_keyframe);
  const bool mismatch = chain && (!read.ok() || *read != m.header().values_checksum());
  // A whole fragment is a keyframe (the shard builds on it); a chain says which one follows it.
  f.keyframe = mismatch ? 0 : chain ? plan.keyframe : a.version;
  // A re-anchor dropped the outstanding push's delta with the rest of the local work.
  f.delta_taken = f.outstanding && (f.delta_taken || take_delta || too_long);
  if (!f.joined) {
    f.joined = true;
    // Streaming: fragment i first pushes after (1 + i/P) * H steps, so pushes spread evenly.
    if (opt_.stream)
      f.offset = static_cast<int64_t>(f.spec->id) * opt_.inner_steps / opt_.num_fragments;
    ++joined_count_;
    f.steps = 0;
    f.tokens = 0;
  } else if (!keep) {  // the local steps since the push are gone: count afresh
    if (too_long) CountReanchor(f);
    f.steps = 0;
    f.tokens = 0;
  }
  // A rebuilt fragment that differs from the shard's (never expected) is taken as version 0: no
  // push leaves it, and the whole fragment, asked for now, replaces it. Adoption moved local
  // and anchor together, so the whole one's adoption keeps this worker's progress.
  f.version = mismatch ? 0 : a.version;
  if (mismatch) shared_.QueuePull(a.fragment, false);
  const double ms = a.answers_push && a.pushed != absl::InfinitePast()
                        ? absl::ToDoubleMilliseconds(absl::Now() - a.pushed)
                        : -1;
  shared_.Update([&](SyncStats& s) {
    if (mismatch) ++s.download_mismatches;
    ++(chain ? s.updates_delta : s.updates_full);
    if (ms >= 0) {
      s.push_to_adopt_ms = Ema(s.push_to_adopt_ms, ms, 0.1);
      s.push_to_adopt_max_ms = std::max(s.push_to_adopt_max_ms, ms);
      auto& recent = s.recent_push_to_adopt_ms;
      if (recent.size() == SyncStats::kRecentLatencies) recent.erase(recent.begin());
      recent.push_back(ms);
    }
    s.versions[a.fragment] = f.version;
    ++s.local_writes[a.fragment];
    s.joined = joined_count_;
    ++s.adoptions;
  });
}

void TrainingSync::CountReanchor(const Fragment& f) {
  const uint64_t steps = static_cast<uint64_t>(std::max<int64_t>(f.steps, 0));
  shared_.Update([&](SyncStats& s) {
    ++s.reanchors;
    s.reanchored_steps += steps;
  });
  SyncEvent e;
  e.kind = SyncEvent::kReanchor;
  e.shard = f.spec->shard;
  e.fragment = f.spec->id;
  e.base_version = e.version = f.version;
  e.steps = steps;
  e.tokens = f.tokens;
  shared_.Event(std::move(e));
}

void TrainingSync::Reanchor(ParamsFn params, Fragment& f) {
  CountReanchor(f);
  for (const Piece& p : f.spec->pieces) {
    const std::span<float> local = params(p.flat_offset, p.length);
    std::memcpy(local.data(), anchor_.data() + p.flat_offset, p.length * sizeof(float));
  }
  shared_.Update([&](SyncStats& s) { ++s.local_writes[f.spec->id]; });
  f.delta_taken = f.outstanding;
  f.steps = 0;
  f.tokens = 0;
}

void TrainingSync::Restagger(uint32_t h) {
  if (!opt_.stream) return;
  const int64_t n = static_cast<int64_t>(frags_.size());
  for (int64_t i = 0; i < n; ++i) {
    Fragment& f = frags_[i];
    if (f.joined) f.offset = f.steps + (i + 1) * static_cast<int64_t>(h) / n - h;
  }
}

std::vector<PushJob> TrainingSync::Step(ParamsFn params, uint64_t tokens, uint32_t h,
                                        kernels::Codec codec, bool draining) {
  h_ = h;
  std::vector<PushJob> due;
  for (Fragment& f : frags_) {
    ++f.steps;
    f.tokens += tokens;
    if (draining || !f.joined || f.outstanding || f.version == 0 ||
        f.steps < static_cast<int64_t>(h) + f.offset)
      continue;
    // Past the bound without an adoption to drop it (a push that ended unapplied and gave its
    // steps back, a shard that restarted): drop it here, and push after H fresh steps.
    if (f.steps > carry_bound()) {
      Reanchor(params, f);
      continue;
    }
    // delta = anchor - local, gathered into the fragment's own order.
    f.delta = pool_.Take(f.spec->numel);
    float* d = f.delta.data.get();
    for (const Piece& p : f.spec->pieces) {
      kernels::Delta(std::span<const float>(anchor_.data() + p.flat_offset, p.length),
                     params(p.flat_offset, p.length), std::span<float>(d, p.length));
      d += p.length;
    }
    // local = anchor - c x delta (the header's "Extrapolation").
    if (extrapolate_ != 1.0f) MoveAlongDelta(params, f, 1.0f - extrapolate_);
    f.outstanding = true;
    f.delta_taken = false;
    f.offset = 0;
    PushJob job;
    job.made = absl::Now();
    job.fragment = f.spec->id;
    job.codec = codec;
    job.delta = std::span<const float>(f.delta.data.get(), f.spec->numel);
    job.seq = f.next_seq++;
    job.base_version = f.version;
    job.keyframe_version = f.keyframe;
    job.tokens = f.pushed_tokens = std::max<uint64_t>(f.tokens, 1);
    f.pushed_steps = std::max<int64_t>(f.steps, 1);
    job.steps = static_cast<uint32_t>(f.pushed_steps);
    due.push_back(std::move(job));
    if (opt_.adopt == SyncOptions::Adopt::kKeep) {  // the next push counts from this one
      f.steps = 0;
      f.tokens = 0;
    }
  }
  return due;
}

}  // namespace diloco::worker
