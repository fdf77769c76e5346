// Shard, introspection (server/shard_internal.h): published versions and values, and the Stats
// JSON (its counters from server/counter_table.h, beside the shard's own state).
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/event_log.h"
#include "common/process_memory.h"
#include "server/counter_table.h"
#include "server/shard_internal.h"

namespace diloco::server {

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

std::vector<LearnerRow> Shard::learners() const { return workers_.Learners(clock_->Now()); }

namespace {

template <typename T>
nlohmann::ordered_json Figure(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

// A float as sent; JSON has no NaN or infinity, so those are named as strings.
nlohmann::ordered_json Figure(const std::optional<float>& v) {
  if (!v) return nullptr;
  if (std::isnan(*v)) return "NaN";
  if (std::isinf(*v)) return *v > 0 ? "+Inf" : "-Inf";
  return *v;
}

nlohmann::ordered_json LearnersJson(const std::vector<LearnerRow>& rows) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const LearnerRow& r : rows) {
    const wire::LearnerFiguresFields& f = r.figures;
    nlohmann::ordered_json j;
    j["worker"] = r.id;
    j["generation"] = r.generation;
    j["host"] = f.host;
    j["device"] = f.device;
    j["codec"] = f.codec;
    j["step"] = Figure(f.step);
    j["loss"] = Figure(f.loss);
    j["tokens_per_s"] = Figure(f.tokens_per_s);
    j["utilization"] = Figure(f.utilization);
    j["inner_steps"] = Figure(f.inner_steps);
    j["bytes_sent"] = Figure(f.bytes_sent);
    j["bytes_received"] = Figure(f.bytes_received);
    j["mean_staleness"] = Figure(f.mean_staleness);
    j["step_time_us"] = r.step_time_us;
    j["seen_age_s"] = r.seen_age_s;
    j["push_age_s"] = Figure(r.push_age_s);
    j["applied_age_s"] = Figure(r.applied_age_s);
    a.push_back(std::move(j));
  }
  return a;
}

}  // namespace

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
  const ProcessMemory mem = ReadProcessMemory().value_or(ProcessMemory{});
  const auto& c = counters_;
  nlohmann::ordered_json j;
  j["shard"] = opt_.shard;
  j["incarnation"] = incarnation_;
  j.update(CounterJson(c));
  nlohmann::ordered_json versions = nlohmann::ordered_json::object(),
                         durable = nlohmann::ordered_json::object(),
                         refused = nlohmann::ordered_json::object();
  for (uint32_t id : owned_) {
    versions[std::to_string(id)] = fragments_.at(id)->published;
    durable[std::to_string(id)] = fragments_.at(id)->durable;
  }
  for (size_t i = 1; i < kErrorCodes; ++i)
    if (c.refused_by_reason[i] > 0)
      refused[wire::EnumNameErrorCode(static_cast<ErrorCode>(i))] = c.refused_by_reason[i];
  j["versions"] = std::move(versions);
  j["max_held_bytes"] = c.max_held_bytes;
  j["trains_cut"] = trains_.trains_cut();
  j["partial_trains"] = trains_.partial_trains();
  // Push trains cut by a lost connection, kept for their workers to resume (schema/kept_trains.h).
  const wire::KeptTrains& kept = trains_.kept();
  j["kept_trains"] = kept.size();
  j["kept_train_bytes"] = kept.bytes();
  j["trains_kept"] = kept.kept();
  j["trains_resumed"] = trains_.trains_resumed();
  j["kept_trains_expired"] = kept.expired();
  j["kept_trains_evicted"] = kept.evicted();
  j["cut_train_chunks"] = c.cut_train_chunks;
  j["store_rollback"] = store_ && !store_->rollback().empty();
  j["round_share"] = c.round_share;
  j["checkpoint_error"] = c.checkpoint_error;
  j["checkpoint_ms"] = c.checkpoint_ms_total;
  j["durable"] = std::move(durable);
  j["params"] = owned_params_;
  j["resident_bytes"] = mem.resident_bytes;
  j["peak_resident_bytes"] = mem.peak_resident_bytes;
  j["pool_fresh_buffers"] = pool_.fresh_allocations();
  j["pool_kept_bytes"] = pool_.kept_bytes();
  j["pool_budget_bytes"] = pool_.budget();
  j["download_bytes"] = DownloadBytes();  // quantized downloads' residuals and updates
  j["download_codec"] = kernels::CodecName(opt_.download);
  j["workers"] = workers_.size();
  j["learners"] = LearnersJson(learners());  // the live ones, with their last figures
  j["insecure"] = opt_.insecure;
  j["refused_by_reason"] = std::move(refused);
  return JsonDump(j);
}

}  // namespace diloco::server
