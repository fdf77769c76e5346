#include "server/worker_table.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"

namespace diloco::server {

WorkerInfo& WorkerTable::Add(uint32_t id) {
  auto& w = workers_[id];
  if (!w) {
    w = std::make_unique<WorkerInfo>();
    w->id = id;
  }
  return *w;
}

WorkerInfo* WorkerTable::Find(uint32_t id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

const WorkerInfo* WorkerTable::Find(uint32_t id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

uint32_t WorkerTable::LiveCount(absl::Time now) const {
  uint32_t n = 0;
  for (const auto& [_, w] : workers_) n += Live(*w, now);
  return n;
}

uint32_t WorkerTable::LeftCount() const {
  uint32_t n = 0;
  for (const auto& [_, w] : workers_) n += w->left;
  return n;
}

double WorkerTable::FleetStepTimeUs(absl::Time now) const {
  double fleet = 0;
  for (const auto& [_, w] : workers_)
    if (w->step_time_us > 0 && Live(*w, now))
      fleet = fleet == 0 ? w->step_time_us : std::min(fleet, w->step_time_us);
  return fleet;
}

double WorkerTable::FleetCadenceS(absl::Time now, std::optional<uint32_t> fragment) const {
  absl::InlinedVector<double, 16> intervals;  // the live workers' known push intervals
  for (const auto& [_, w] : workers_) {
    if (!Live(*w, now)) continue;
    for (const auto& [id, rate] : w->push_rate)
      if (rate.interval_s > 0 && (!fragment || id == *fragment))
        intervals.push_back(rate.interval_s);
  }
  if (intervals.empty()) return 0;
  auto mid = intervals.begin() + (intervals.size() - 1) / 2;
  std::nth_element(intervals.begin(), mid, intervals.end());
  return *mid;
}

uint32_t WorkerTable::LiveMissing(absl::Time now, InRound in_round) const {
  uint32_t missing = 0;
  for (const auto& [id, w] : workers_) missing += Live(*w, now) && !in_round(id);
  return missing;
}

double WorkerTable::ExpectedMissingWeight(absl::Time now, uint32_t fragment,
                                          InRound in_round) const {
  const double cadence = FleetCadenceS(now, fragment);
  double missing = 0;
  for (const auto& [id, w] : workers_) {
    if (in_round(id)) continue;
    auto it = w->push_rate.find(fragment);
    if (it == w->push_rate.end()) continue;  // never pushed this fragment: nothing expected
    const PushRate& r = it->second;
    if (!Weighs(*w, now)) continue;
    const double per_round =
        r.interval_s > 0 && cadence > 0 ? std::min(1.0, cadence / r.interval_s) : 1.0;
    missing += r.weight * per_round;
  }
  return missing;
}

uint64_t WorkerTable::OldestHeld(absl::Time now, uint32_t fragment, uint64_t published) const {
  uint64_t oldest = published;
  for (const auto& [_, w] : workers_) {
    if (!Live(*w, now)) continue;
    if (auto h = w->holds.find(fragment); h != w->holds.end()) oldest = std::min(oldest, h->second);
  }
  return oldest;
}

std::vector<LearnerRow> WorkerTable::Learners(absl::Time now) const {
  std::vector<LearnerRow> rows;
  for (const auto& [id, w] : workers_) {
    if (!Live(*w, now)) continue;
    LearnerRow r;
    r.id = id;
    r.generation = w->generation;
    r.step_time_us = w->step_time_us;
    r.seen_age_s = absl::ToDoubleSeconds(now - w->last_seen);
    absl::Time pushed = absl::InfinitePast();
    for (const auto& [_, rate] : w->push_rate) pushed = std::max(pushed, rate.last);
    if (pushed != absl::InfinitePast()) r.push_age_s = absl::ToDoubleSeconds(now - pushed);
    if (w->last_applied != absl::InfinitePast())
      r.applied_age_s = absl::ToDoubleSeconds(now - w->last_applied);
    if (w->figures) r.figures = *w->figures;
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(),
            [](const LearnerRow& a, const LearnerRow& b) { return a.id < b.id; });
  return rows;
}

}  // namespace diloco::server
