#include "tests/chaos/invariants.h"

#include <map>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/util/jsonl.h"

namespace diloco::testing {

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
    auto num = [&](const char* key) {  // exact: 48-bit digests and ids are unsigned integers
      const auto it = line.find(key);
      return it != line.end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
    };
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

}  // namespace diloco::testing
