#include "benchmarks/sim/fleet_config.h"

#include "absl/strings/str_cat.h"

namespace diloco::sim {

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kAsync:
      return "async";
    case Mode::kRigid:
      return "rigid";
    case Mode::kElastic:
      return "elastic";
  }
  return "?";
}

absl::StatusOr<Mode> ParseMode(const std::string& s) {
  if (s == "async") return Mode::kAsync;
  if (s == "rigid") return Mode::kRigid;
  if (s == "elastic") return Mode::kElastic;
  return absl::InvalidArgumentError(absl::StrCat("mode '", s, "': expected async, rigid, elastic"));
}

server::RoundPolicy PolicyOf(const FleetConfig& c) {
  server::RoundPolicy p;
  if (c.mode == Mode::kAsync) {
    p.quorum = 1;
    p.grace_cap = absl::Seconds(c.async_grace_cap_s);
  } else {
    p.quorum = c.learners;
    p.grace_cap = absl::Seconds(c.sync_grace_cap_s);
    p.elastic = c.mode == Mode::kElastic;
  }
  return p;
}

double WorkerTimeoutOf(const FleetConfig& c) {
  switch (c.mode) {
    case Mode::kAsync:
      return c.async_timeout_s;
    case Mode::kRigid:
      return std::numeric_limits<double>::infinity();
    case Mode::kElastic:
      return c.detect_s;
  }
  return 0;
}

bool Lockstep(const FleetConfig& c) { return c.mode != Mode::kAsync; }

}  // namespace diloco::sim
