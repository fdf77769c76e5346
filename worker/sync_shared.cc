#include "worker/sync_shared.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "common/ema.h"
#include "kernels/codec.h"

namespace diloco::worker {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

SyncShared::SyncShared(uint32_t num_fragments, uint32_t num_shards, size_t max_events)
    : max_events_(max_events), host_(HostName()) {
  MutexLock g(&mu_);  // no other thread yet; the lock satisfies the analysis
  stats_.versions.assign(num_fragments, 0);
  stats_.local_writes.assign(num_fragments, 0);
  shard_fleet_us_.assign(num_shards, 0);
}

void SyncShared::QueuePushes(std::vector<PushJob> jobs) {
  MutexLock g(&mu_);
  pending_pushes_ += jobs.size();
  for (auto& j : jobs) pushes_.push_back(std::move(j));
}

void SyncShared::QueueInit(uint32_t fragment, std::shared_ptr<const wire::Bytes> values) {
  MutexLock g(&mu_);
  inits_.emplace_back(fragment, std::move(values));
}

void SyncShared::QueuePull(uint32_t fragment, bool answers_push) {
  MutexLock g(&mu_);
  pulls_.emplace_back(fragment, answers_push);
}

SyncShared::Outbox SyncShared::TakeOutbox() {
  Outbox out;
  MutexLock g(&mu_);
  out.pushes.swap(pushes_);
  out.inits.swap(inits_);
  out.pulls.swap(pulls_);
  return out;
}

void SyncShared::Deliver(Arrival a) {
  MutexLock g(&mu_);
  arrivals_.push_back(std::move(a));
  cv_.SignalAll();
}

void SyncShared::PushEnded() {
  MutexLock g(&mu_);
  if (pending_pushes_ > 0) --pending_pushes_;
  cv_.SignalAll();
}

void SyncShared::Fatal(std::string why) {
  MutexLock g(&mu_);
  if (fatal_.empty()) fatal_ = std::move(why);
  cv_.SignalAll();
}

std::deque<Arrival> SyncShared::TakeArrivals(absl::Duration wait) {
  std::deque<Arrival> out;
  MutexLock g(&mu_);
  if (arrivals_.empty() && wait > absl::ZeroDuration()) cv_.WaitWithTimeout(&mu_, wait);
  out.swap(arrivals_);
  return out;
}

std::string SyncShared::fatal() const {
  MutexLock g(&mu_);
  return fatal_;
}

bool SyncShared::draining() const {
  MutexLock g(&mu_);
  return draining_;
}

SyncShared::Drained SyncShared::AwaitDrain(absl::Duration wait) {
  Drained d;
  MutexLock g(&mu_);
  draining_ = true;
  d.pending_before = pending_pushes_;
  if (pending_pushes_ > 0 && wait > absl::ZeroDuration()) cv_.WaitWithTimeout(&mu_, wait);
  d.pending = pending_pushes_;
  d.arrivals.swap(arrivals_);
  return d;
}

void SyncShared::Add(uint64_t SyncStats::*counter, uint64_t n) {
  MutexLock g(&mu_);
  stats_.*counter += n;
}

void SyncShared::Update(absl::FunctionRef<void(SyncStats&)> change) {
  MutexLock g(&mu_);
  change(stats_);
}

void SyncShared::NoteUpload(absl::Time start, absl::Time end, uint64_t bytes) {
  MutexLock g(&mu_);
  up_.Add(start, end, bytes);
  stats_.up_bytes_per_s = up_.bytes_per_s();
}

void SyncShared::NoteDownload(std::optional<absl::Time> start, absl::Time end, uint64_t bytes,
                              uint64_t numel) {
  MutexLock g(&mu_);
  if (numel > 0)
    down_bytes_per_param_ =
        Ema(down_bytes_per_param_, static_cast<double>(bytes) / static_cast<double>(numel), 0.2);
  if (start) down_.Add(*start, end, bytes);
  stats_.down_bytes_per_s = down_.bytes_per_s();
  stats_.down_bytes_per_param = down_bytes_per_param_;
}

LinkMeasure SyncShared::link() const {
  MutexLock g(&mu_);
  LinkMeasure m;
  m.up_bytes_per_s = up_.bytes_per_s();
  m.down_bytes_per_s = down_.bytes_per_s();
  m.down_bytes_per_param = down_bytes_per_param_;
  return m;
}

void SyncShared::Event(SyncEvent e) {
  MutexLock g(&mu_);
  if (events_.size() >= max_events_) events_.pop_front();
  events_.push_back(std::move(e));
}

std::vector<SyncEvent> SyncShared::TakeEvents() {
  MutexLock g(&mu_);
  std::vector<SyncEvent> out(std::make_move_iterator(events_.begin()),
                             std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

SyncStats SyncShared::stats() const {
  MutexLock g(&mu_);
  SyncStats s = stats_;
  s.step_time_us = static_cast<double>(step_time_us_.load());
  s.fleet_step_time_us = static_cast<double>(fleet_step_time_us_.load());
  return s;
}

void SyncShared::SetFleetStepTime(uint32_t shard, uint64_t us) {
  MutexLock g(&mu_);
  if (shard >= shard_fleet_us_.size()) return;
  shard_fleet_us_[shard] = us;
  uint64_t fleet = 0;
  for (uint64_t v : shard_fleet_us_)
    if (v > 0 && (fleet == 0 || v < fleet)) fleet = v;
  fleet_step_time_us_ = fleet;
}

}  // namespace diloco::worker

namespace diloco::worker {

void SyncShared::SetProgress(const wire::LearnerFiguresFields& progress) {
  MutexLock g(&mu_);
  progress_ = progress;
}

wire::LearnerFiguresFields SyncShared::Figures() const {
  MutexLock g(&mu_);
  wire::LearnerFiguresFields f = progress_;
  f.codec = kernels::CodecName(stats_.codec_now);
  if (stats_.inner_steps_now > 0) f.inner_steps = stats_.inner_steps_now;
  f.bytes_sent = stats_.bytes_sent;
  f.bytes_received = stats_.bytes_received;
  if (stats_.applied > 0) f.mean_staleness = static_cast<float>(stats_.mean_staleness);
  f.host = host_;
  return f;
}

}  // namespace diloco::worker
