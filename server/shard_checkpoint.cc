// Shard, durability (server/shard_internal.h): recovery from the store's newest checkpoint,
// when checkpoints are taken, and what a finished one makes publishable.
#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "server/shard_internal.h"

namespace diloco::server {

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
    WorkerInfo& w = workers_.Add(d.worker_id);  // not seen yet: not live
    w.generation = d.generation;
    w.applied_seq[d.fragment_id] = d.last_seq;
  }
  checkpoint_id_ = c.id;
  counters_.rounds = rounds_at_checkpoint_ = c.rounds;
  return absl::OkStatus();
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
  for (const auto& [id, w] : workers_.all())
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
  const RoundPolicy policy = Round();
  bool unpublished = false;
  for (uint32_t id : owned_) {
    const auto& f = *fragments_.at(id);
    if (!f.writing) t = std::min(t, CloseDeadline(policy, grace, f.round));
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

}  // namespace diloco::server
