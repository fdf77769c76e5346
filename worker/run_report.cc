// The reporting helpers of diloco-worker's run (run_report.h).
#include "worker/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checksum.h"
#include "common/log.h"
#include "common/process_memory.h"

namespace diloco::worker {
namespace {

// The q-quantile (nearest rank) of a non-empty `v`.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

int Fail(const absl::Status& s) {
  Logf(LogLevel::kError, "diloco-worker: %s", std::string(s.message()).c_str());
  return 2;
}

uint64_t ParamsChecksum(std::span<const float> p) {
  return Checksum64(p.data(), p.size_bytes()) & ((uint64_t{1} << 48) - 1);
}

void WriteSyncEvents(SyncClient& sync, uint32_t wid, bool write, EventLog& log) {
  const auto events = sync.TakeEvents();
  for (const auto& e : events)
    if (e.kind == SyncEvent::kLinkChoice)
      Logf(LogLevel::kInfo, "worker %u link choice: %s", wid, e.detail.c_str());
  if (!write) return;
  for (const auto& e : events) {
    JsonObject ev;
    ev.Add("event", SyncEventName(e.kind)).Add("worker", uint64_t{wid});
    ev.Add("shard", uint64_t{e.shard});
    if (e.kind != SyncEvent::kShardRestart && e.kind != SyncEvent::kLinkChoice) {
      ev.Add("fragment", uint64_t{e.fragment}).Add("seq", e.seq);
      ev.Add("base_version", e.base_version).Add("version", e.version);
    }
    if (e.kind == SyncEvent::kPush || e.kind == SyncEvent::kReanchor)
      ev.Add("steps", e.steps).Add("tokens", e.tokens);
    if (e.kind == SyncEvent::kPush) ev.Add("codec", kernels::CodecName(e.codec));
    if (e.kind == SyncEvent::kLinkChoice)
      ev.Add("inner_steps", e.steps).Add("codec", kernels::CodecName(e.codec));
    if (!e.detail.empty()) ev.Add("detail", e.detail);
    log.Write(ev);
  }
}

float EvalOnTrainer(Trainer& tr, std::span<const float> values, bool restore) {
  std::span<float> p = tr.params();
  std::vector<float> saved;
  if (restore) saved.assign(p.begin(), p.end());
  std::copy(values.begin(), values.end(), p.begin());
  const float loss = tr.EvalLoss();
  if (!restore) return loss;
  p = tr.params();  // fetched again: a GPU trainer's host mirror is refreshed by params()
  std::copy(saved.begin(), saved.end(), p.begin());
  return loss;
}

void AddMemory(JsonObject& ev, uint64_t params) {
  const auto m = ReadProcessMemory();
  if (!m.ok() || params == 0) return;
  ev.Add("resident_bytes_per_param", static_cast<double>(m->resident_bytes) / params);
  ev.Add("peak_bytes_per_param", static_cast<double>(m->peak_resident_bytes) / params);
}

void AddSyncFigures(JsonObject& ev, const SyncStats& st) {
  ev.Add("bytes_sent", st.bytes_sent).Add("bytes_received", st.bytes_received);
  ev.Add("codec", kernels::CodecName(st.codec_now));
  ev.Add("link_choices", st.link_choices);
  ev.Add("up_bytes_per_s", st.up_bytes_per_s).Add("down_bytes_per_s", st.down_bytes_per_s);
  ev.Add("down_bytes_per_param", st.down_bytes_per_param);
  ev.Add("round_need_s", st.round_need_s).Add("round_budget_s", st.round_budget_s);
  ev.Add("updates_full", st.updates_full).Add("updates_delta", st.updates_delta);
  ev.Add("download_mismatches", st.download_mismatches);
  ev.Add("push_to_adopt_ms", st.push_to_adopt_ms);
  ev.Add("push_to_adopt_max_ms", st.push_to_adopt_max_ms);
  if (st.recent_push_to_adopt_ms.empty()) return;
  ev.Add("push_to_adopt_p50_ms", Quantile(st.recent_push_to_adopt_ms, 0.5));
  ev.Add("push_to_adopt_p99_ms", Quantile(st.recent_push_to_adopt_ms, 0.99));
}

std::string CodecText(const WorkerOptions& w) {
  if (!w.cadence.auto_codec) return kernels::CodecName(w.codec);
  std::vector<std::string> names;
  for (const auto& c : w.cadence.auto_codecs) names.push_back(kernels::CodecName(c));
  return absl::StrCat("auto (", absl::StrJoin(names, ", "), ")");
}
std::string HText(const WorkerOptions& w) {
  if (!w.cadence.auto_inner_steps) return absl::StrCat(w.inner_steps);
  return absl::StrCat("auto (", w.inner_steps, "..", w.cadence.inner_steps_max, ")");
}

double Utilization(absl::Duration busy, absl::Duration wall) {
  return wall > absl::ZeroDuration() ? absl::FDivDuration(busy, wall) : 0.0;
}

void AddUtilization(JsonObject& ev, absl::Duration busy, absl::Duration wall) {
  ev.Add("busy_s", absl::ToDoubleSeconds(busy)).Add("wall_s", absl::ToDoubleSeconds(wall));
  ev.Add("utilization", Utilization(busy, wall));
}

}  // namespace diloco::worker
