// diloco-ctl top: a live view of a fleet over all its shards. Each refresh asks every shard for
// its Stats (in parallel, each bounded by --timeout_ms: a shard that does not answer shows as
// "no answer" and never holds the view) and prints one line per live learner with the figures
// its heartbeats carry (docs/protocol.md, "Learner figures"), the fleet's totals and each
// shard's round rate (rounds closed between two refreshes over the time between them).
// --once prints one table and exits, --json one JSON document; both take two samples
// --interval apart, so that the round rates are known.
#include <cmath>
#include <cstdio>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "ctl/commands.h"
#include "schema/transport.h"

ABSL_DECLARE_FLAG(int, timeout_ms);
ABSL_DECLARE_FLAG(std::string, curve_server_key);
ABSL_DECLARE_FLAG(std::string, curve_secret_key_file);
ABSL_FLAG(std::string, servers, "", "top: the shards' endpoints, tcp://HOST:PORT,...");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1), "top: time between two refreshes");
ABSL_FLAG(bool, once, false, "top: print one table and exit");
ABSL_FLAG(bool, json, false, "top: print one JSON document and exit");

namespace diloco::ctl {
namespace {

using Json = nlohmann::ordered_json;

struct Sample {
  std::vector<std::optional<Json>> shards;  // by --servers position; nullopt: no answer
  std::vector<std::string> errors;
  absl::Time at;
};

Sample Take(const std::vector<std::string>& servers, absl::Duration timeout,
            const wire::CurveClientKeys* curve) {
  std::vector<std::future<absl::StatusOr<std::string>>> asks;
  for (const std::string& s : servers)
    asks.push_back(std::async(std::launch::async, [&s, timeout, curve] {
      return wire::RequestStats(s, timeout, curve);
    }));
  Sample out;
  out.at = absl::Now();
  for (auto& a : asks) {
    auto r = a.get();
    Json j = r.ok() ? Json::parse(*r, nullptr, false) : Json();
    if (r.ok() && j.is_object()) {
      out.shards.emplace_back(std::move(j));
      out.errors.emplace_back();
    } else {
      out.shards.emplace_back(std::nullopt);
      out.errors.push_back(r.ok() ? "answer is not a JSON object"
                                  : std::string(r.status().message()));
    }
  }
  return out;
}

double Num(const Json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return NAN;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {  // "NaN", "+Inf", "-Inf" as the shard spells them
    const std::string s = it->get<std::string>();
    return s == "+Inf" ? INFINITY : s == "-Inf" ? -INFINITY : NAN;
  }
  return NAN;
}

std::string Str(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// One learner across the shards: the figures of the shard that heard it last, the newest push
// of any shard.
std::map<uint64_t, Json> Learners(const Sample& s) {
  std::map<uint64_t, Json> by_id;
  for (const auto& shard : s.shards) {
    if (!shard || !shard->contains("learners") || !(*shard)["learners"].is_array()) continue;
    for (const Json& l : (*shard)["learners"]) {
      if (!l.contains("worker") || !l["worker"].is_number_unsigned()) continue;
      const uint64_t id = l["worker"].get<uint64_t>();
      auto [it, fresh] = by_id.emplace(id, l);
      if (fresh) continue;
      // The freshest shard's figures; the youngest ages over every shard.
      const Json before = it->second;
      if (Num(l, "seen_age_s") < Num(before, "seen_age_s")) it->second = l;
      for (const char* key : {"push_age_s", "applied_age_s"}) {
        const double a = Num(l, key), b = Num(before, key);
        const double youngest = std::isnan(a) ? b : std::isnan(b) ? a : std::min(a, b);
        if (!std::isnan(youngest)) it->second[key] = youngest;
      }
    }
  }
  return by_id;
}

double RoundRate(const Sample* before, const Sample& now, size_t i) {
  if (!before || !before->shards[i] || !now.shards[i]) return NAN;
  const double dt = absl::ToDoubleSeconds(now.at - before->at);
  if (dt <= 0) return NAN;
  return (Num(*now.shards[i], "rounds") - Num(*before->shards[i], "rounds")) / dt;
}

Json Document(const std::vector<std::string>& servers, const Sample* before, const Sample& now) {
  Json d;
  Json learners = Json::array();
  double tps = 0;
  uint64_t up = 0, down = 0;
  for (auto& [id, l] : Learners(now)) {
    const double t = Num(l, "tokens_per_s");
    if (std::isfinite(t)) tps += t;
    if (l["bytes_sent"].is_number_unsigned()) up += l["bytes_sent"].get<uint64_t>();
    if (l["bytes_received"].is_number_unsigned()) down += l["bytes_received"].get<uint64_t>();
    learners.push_back(l);
  }
  Json shards = Json::array();
  for (size_t i = 0; i < servers.size(); ++i) {
    Json s;
    s["server"] = servers[i];
    s["answered"] = now.shards[i].has_value();
    if (now.shards[i]) {
      s["shard"] = (*now.shards[i])["shard"];
      s["rounds"] = (*now.shards[i])["rounds"];
      const double r = RoundRate(before, now, i);
      s["rounds_per_s"] = std::isfinite(r) ? Json(r) : Json();
    } else {
      s["error"] = now.errors[i];
    }
    shards.push_back(std::move(s));
  }
  d["learners"] = std::move(learners);
  d["totals"] = {{"learners", d["learners"].size()},
                 {"tokens_per_s", tps},
                 {"bytes_sent", up},
                 {"bytes_received", down}};
  d["shards"] = std::move(shards);
  return d;
}

std::string Bytes(double b) {
  if (std::isnan(b)) return "-";
  if (b >= 1 << 30) return absl::StrFormat("%.2fG", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.1fM", b / (1 << 20));
  return absl::StrFormat("%.1fK", b / 1024);
}

std::string Fixed(double v, int decimals) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.*f", decimals, v);
}

std::string Table(const Json& d) {
  std::string t = absl::StrFormat("%-6s %-14s %16s %8s %8s %10s %5s %6s %9s %-13s %9s %9s\n",
                                  "worker", "host", "gen", "step", "loss", "tok/s", "util", "stale",
                                  "applied_s", "codec/H", "up", "down");
  for (const Json& l : d["learners"]) {
    const double h = Num(l, "inner_steps");
    absl::StrAppend(
        &t, absl::StrFormat("%-6s %-14.14s %16s %8s %8s %10s %5s %6s %9s %-13s %9s %9s\n",
                            l["worker"].dump(), Str(l, "host"), l["generation"].dump(),
                            Fixed(Num(l, "step"), 0), Fixed(Num(l, "loss"), 4),
                            Fixed(Num(l, "tokens_per_s"), 0), Fixed(Num(l, "utilization"), 2),
                            Fixed(Num(l, "mean_staleness"), 2), Fixed(Num(l, "applied_age_s"), 1),
                            absl::StrCat(Str(l, "codec"), "/", Fixed(h, 0)),
                            Bytes(Num(l, "bytes_sent")), Bytes(Num(l, "bytes_received"))));
  }
  const Json& tot = d["totals"];
  absl::StrAppend(
      &t, absl::StrFormat("total: %d learners, %.0f tok/s, up %s, down %s\n",
                          tot["learners"].get<int>(), Num(tot, "tokens_per_s"),
                          Bytes(Num(tot, "bytes_sent")), Bytes(Num(tot, "bytes_received"))));
  for (const Json& s : d["shards"]) {
    if (!s["answered"].get<bool>()) {
      absl::StrAppend(&t, "shard ", Str(s, "server"), ": no answer (", Str(s, "error"), ")\n");
      continue;
    }
    absl::StrAppend(&t, absl::StrFormat("shard %s %s: rounds %s, %s rounds/s\n", s["shard"].dump(),
                                        Str(s, "server"), s["rounds"].dump(),
                                        Fixed(Num(s, "rounds_per_s"), 2)));
  }
  return t;
}

}  // namespace

int Top(const Args& args) {
  if (!args.empty()) return Usage("top takes no arguments, only flags");
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (servers.empty()) return Usage("top needs --servers=tcp://HOST:PORT,...");
  const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms <= 0) return Usage("--timeout_ms must be positive");
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  if (interval <= absl::ZeroDuration()) return Usage("--interval must be positive");
  const bool once = absl::GetFlag(FLAGS_once), json = absl::GetFlag(FLAGS_json);
  auto curve = wire::CurveClientKeysFrom(absl::GetFlag(FLAGS_curve_server_key),
                                         absl::GetFlag(FLAGS_curve_secret_key_file));
  if (!curve.ok()) return Usage(std::string(curve.status().message()));
  const wire::CurveClientKeys* keys = curve->has_value() ? &**curve : nullptr;
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  std::optional<Sample> before;
  for (;;) {
    Sample now = Take(servers, timeout, keys);
    if ((once || json) && !before) {
      before = std::move(now);
      absl::SleepFor(interval);
      continue;
    }
    const Json d = Document(servers, before ? &*before : nullptr, now);
    if (json) {
      std::printf("%s\n", JsonDump(d).c_str());
      return 0;
    }
    if (once) {
      std::printf("%s", Table(d).c_str());
      return 0;
    }
    std::printf("\033[H\033[2J%s", Table(d).c_str());
    std::fflush(stdout);
    const absl::Time next = now.at + interval;
    before = std::move(now);
    absl::SleepFor(next - absl::Now());
  }
}

}  // namespace diloco::ctl
