#include "tests/chaos/invariants.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/util/jsonl.h"

namespace diloco::testing {
namespace {

// An unsigned integer member, exact; 0 when absent or not one.
uint64_t Unsigned(const Json& line, const char* key) {
  const auto it = line.find(key);
  return it != line.end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
}

// A member that may be absent: nullopt unless it is a non-negative integer.
std::optional<uint64_t> Claimed(const Json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

}  // namespace

std::vector<AuditLine> ReadAudit(const std::filesystem::path& jsonl) {
  std::vector<AuditLine> lines;
  for (const Json& line : ReadJsonLines(jsonl)) {  // a line cut by a kill is left out
    AuditLine a;
    const std::string event = EventName(line);
    if (event == "recovered")
      a.kind = AuditLine::kRecovered;
    else if (event == "initialized")
      a.kind = AuditLine::kInitialized;
    else if (event == "applied")
      a.kind = AuditLine::kApplied;
    else
      continue;
    // Exact: 48-bit digests and ids are unsigned integers.
    auto num = [&](const char* key) { return Unsigned(line, key); };
    // A decimal string: 64 random bits do not survive a JSON number.
    if (const auto it = line.find("incarnation");
        it != line.end() && it->is_string() &&
        !absl::SimpleAtoi(it->get<std::string>(), &a.incarnation))
      a.incarnation = 0;
    a.fragment = num("fragment");
    a.version = num("version");
    a.digest = num("digest");
    a.worker = num("worker");
    a.generation = num("generation");
    a.seq = num("seq");
    if (a.kind == AuditLine::kApplied) {
      a.steps = Claimed(line, "steps");
      a.tokens = Claimed(line, "tokens");
    }
    lines.push_back(a);
  }
  return lines;
}

std::vector<Violation> CheckShardAudit(const std::vector<AuditLine>& lines, bool per_round,
                                       AuditSummary* summary) {
  std::vector<Violation> v;
  AuditSummary s;
  using Push = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;  // worker, gen, fragment, seq
  std::map<Push, uint64_t> applied;                                 // -> version, not undone
  // Per fragment, in the current timeline: the digest published at each version.
  absl::flat_hash_map<uint64_t, std::map<uint64_t, uint64_t>> published;
  absl::flat_hash_map<uint64_t, int> initialized;
  bool started = false;
  uint64_t incarnation = 0;
  for (const auto& a : lines) {
    switch (a.kind) {
      case AuditLine::kRecovered: {
        if (!started || a.incarnation != incarnation) ++s.incarnations;
        const bool first = !started;
        started = true;
        incarnation = a.incarnation;
        auto& pub = published[a.fragment];
        if (first || pub.empty()) break;  // nothing published before: nothing to keep
        const uint64_t last = pub.rbegin()->first;
        const auto at = pub.find(a.version);
        if (per_round && a.version < last)
          v.push_back({3, absl::StrCat("fragment ", a.fragment, ": incarnation ", a.incarnation,
                                       " recovered version ", a.version, " but version ", last,
                                       " had been published (per-round)")});
        if (!per_round && a.version > last)
          v.push_back({3, absl::StrCat("fragment ", a.fragment, ": incarnation ", a.incarnation,
                                       " recovered version ", a.version,
                                       " beyond the newest published, ", last, " (periodic)")});
        if (at != pub.end() && at->second != a.digest)
          v.push_back({3, absl::StrCat("fragment ", a.fragment, ": incarnation ", a.incarnation,
                                       " recovered version ", a.version, " with digest ", a.digest,
                                       ", published with ", at->second)});
        // What lies beyond the recovered version is undone (periodic mode): those pushes may
        // be applied again, and those versions published again with other values.
        pub.erase(pub.upper_bound(a.version), pub.end());
        for (auto it = applied.begin(); it != applied.end();) {
          if (std::get<2>(it->first) == a.fragment && it->second > a.version) {
            ++s.rolled_back;
            it = applied.erase(it);
          } else {
            ++it;
          }
        }
        break;
      }
      case AuditLine::kInitialized:
        if (++initialized[a.fragment] > 1)
          v.push_back({6, absl::StrCat("fragment ", a.fragment, ": theta(0) accepted again in ",
                                       "incarnation ", a.incarnation)});
        break;
      case AuditLine::kApplied: {
        ++s.applied;
        s.max_version = std::max(s.max_version, a.version);
        const Push p{a.worker, a.generation, a.fragment, a.seq};
        if (auto [it, fresh] = applied.emplace(p, a.version); !fresh)
          v.push_back(
              {2, absl::StrCat("worker ", a.worker, " generation ", a.generation, " fragment ",
                               a.fragment, " seq ", a.seq, ": applied in version ", it->second,
                               " and again in ", a.version, " (incarnation ", a.incarnation, ")")});
        auto& pub = published[a.fragment];
        if (auto [it, fresh] = pub.emplace(a.version, a.digest); !fresh && it->second != a.digest)
          v.push_back({3, absl::StrCat("fragment ", a.fragment, ": version ", a.version,
                                       " published with digests ", it->second, " and ", a.digest)});
        break;
      }
    }
  }
  if (summary) *summary = s;
  return v;
}

std::vector<Violation> CheckWorkerVersions(const std::string& worker,
                                           const std::vector<WorkerApplied>& applied,
                                           const std::vector<bool>& per_round) {
  std::vector<Violation> v;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> newest;
  for (const auto& a : applied) {
    if (a.shard >= per_round.size() || !per_round[a.shard]) continue;
    auto& n = newest[{a.shard, a.fragment}];
    if (a.version < n)
      v.push_back({6, absl::StrCat(worker, ": shard ", a.shard, " fragment ", a.fragment,
                                   " answered with version ", a.version, " after version ", n)});
    n = std::max(n, a.version);
  }
  return v;
}

std::vector<PushClaim> AppliedClaims(const std::string& source,
                                     const std::vector<AuditLine>& lines) {
  std::vector<PushClaim> out;
  for (const auto& a : lines)
    if (a.kind == AuditLine::kApplied)
      out.push_back({source, a.worker, a.fragment, a.seq, a.steps, a.tokens});
  return out;
}

std::vector<PushClaim> ReadPushClaims(const std::filesystem::path& jsonl,
                                      const std::string& source) {
  std::vector<PushClaim> out;
  for (const Json& line : ReadJsonLines(jsonl)) {
    if (EventName(line) != "push") continue;
    out.push_back({source, Unsigned(line, "worker"), Unsigned(line, "fragment"),
                   Unsigned(line, "seq"), Claimed(line, "steps"), Claimed(line, "tokens")});
  }
  return out;
}

std::vector<Violation> CheckPushClaims(const std::string& what,
                                       const std::vector<PushClaim>& claims, uint64_t max_steps,
                                       ClaimSummary* summary) {
  std::vector<Violation> v;
  ClaimSummary s;
  for (const auto& c : claims) {
    ++s.pushes;
    if (c.tokens) s.max_tokens = std::max(s.max_tokens, *c.tokens);
    if (!c.steps) continue;
    ++s.with_steps;
    s.max_steps = std::max(s.max_steps, *c.steps);
    if (*c.steps > max_steps)
      v.push_back({8, absl::StrCat(c.source, ": worker ", c.worker, " fragment ", c.fragment,
                                   " seq ", c.seq, " claims ", *c.steps, " steps",
                                   c.tokens ? absl::StrCat(" (", *c.tokens, " tokens)") : "",
                                   ", beyond carry_max x H = ", max_steps)});
  }
  if (s.with_steps == 0)
    v.push_back({8, absl::StrCat("none of the ", s.pushes, " ", what,
                                 " said its steps: nothing was checked")});
  if (summary) *summary = s;
  return v;
}

std::vector<Violation> CheckProgress(const ProgressFigures& f) {
  std::vector<Violation> v;
  const double closed = (f.initial - f.final) / (f.initial - f.floor);
  if (!(closed >= kMinGapClosed))
    v.push_back({7, absl::StrFormat("the global model closed %.3f of the gap from theta(0) "
                                    "(%.4f) to the floor (%.4f): loss %.4f",
                                    closed, f.initial, f.floor, f.final)});
  if (f.midway.empty()) return v;
  std::optional<double> best;
  for (const auto& m : f.midway)
    if (m && (!best || *m < *best)) best = *m;
  if (!best) {
    v.push_back({7, absl::StrCat("none of the ", f.midway.size(),
                                 " midway evaluations of the global model succeeded")});
    return v;
  }
  if (!(f.final <= *best + kMaxLossRegression))
    v.push_back({7, absl::StrFormat("the global model ended at loss %.4f, %.4f worse than its "
                                    "best midway evaluation (%.4f); at most %.2f allowed",
                                    f.final, f.final - *best, *best, kMaxLossRegression)});
  return v;
}

}  // namespace diloco::testing
