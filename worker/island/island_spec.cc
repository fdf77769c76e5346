#include "worker/island/island_spec.h"

#include <string_view>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace diloco::island {
namespace {

// An integer variable of the environment: absent, or its value, or an error naming it.
absl::StatusOr<std::optional<int>> EnvInt(const EnvFn& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return std::optional<int>();
  int x = 0;
  if (!absl::SimpleAtoi(v, &x))
    return absl::InvalidArgumentError(absl::StrCat(name, "=", v, ": not an integer"));
  return std::optional<int>(x);
}

absl::Status ParsePort(const std::string& text, const std::string& what, int* port) {
  if (!absl::SimpleAtoi(text, port) || *port <= 0 || *port > 65535)
    return absl::InvalidArgumentError(absl::StrCat(what, ": port '", text, "' is not in 1..65535"));
  return absl::OkStatus();
}

// LOCAL_RANK, else SLURM_LOCALID, else 0.
absl::Status ResolveLocalRank(const EnvFn& env, IslandSpec& s) {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
    absl::StatusOr<std::optional<int>> v = EnvInt(env, name);
    if (!v.ok()) return v.status();
    if (!*v) continue;
    if (**v < 0) return absl::InvalidArgumentError(absl::StrCat(name, "=", **v, ": must be >= 0"));
    s.local_rank = **v, s.local_rank_from = name;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IslandSpec> ResolveIsland(const IslandFlags& flags, const EnvFn& env) {
  IslandSpec s;
  s.timeout = flags.timeout;
  s.rendezvous_timeout = flags.rendezvous_timeout;
  s.insecure = flags.insecure;
  s.rendezvous_alone = flags.rendezvous_alone;
  if (s.timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError(absl::StrCat(
        "--island_timeout=", absl::FormatDuration(flags.timeout), ": must be positive"));
  if (s.rendezvous_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError(
        absl::StrCat("--island_rendezvous_timeout=", absl::FormatDuration(flags.rendezvous_timeout),
                     ": must be positive"));
  std::string rank_name, size_name;
  if (flags.rank || flags.size) {
    if (!flags.rank || !flags.size)
      return absl::InvalidArgumentError("--island_rank and --island_size go together");
    s.rank = *flags.rank, s.size = *flags.size, s.source = "flags";
    rank_name = "--island_rank", size_name = "--island_size";
  } else {
    // torchrun's pair must come together. Slurm sets SLURM_PROCID in a batch script too, where
    // no step runs yet: its island is the srun step's (SLURM_STEP_NUM_TASKS), or none.
    for (auto [r, n, source] : {std::tuple{"RANK", "WORLD_SIZE", "torchrun"},
                                std::tuple{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "slurm"}}) {
      absl::StatusOr<std::optional<int>> rank = EnvInt(env, r), size = EnvInt(env, n);
      if (!rank.ok()) return rank.status();
      if (!size.ok()) return size.status();
      if (!*rank || !*size) {
        if (*rank != *size && std::string_view(source) == "torchrun")
          return absl::InvalidArgumentError(
              absl::StrCat(*rank ? r : n, " is set but ", *rank ? n : r, " is not (", source,
                           "'s variables name an island's rank and size together)"));
        continue;
      }
      s.rank = **rank, s.size = **size, s.source = source;
      rank_name = absl::StrCat(r, " (", source, ")"),
      size_name = absl::StrCat(n, " (", source, ")");
      break;
    }
    if (s.source.empty()) {
      if (s.rendezvous_alone)
        return absl::InvalidArgumentError(
            "--island_rendezvous_alone needs an island of one: --island_rank=0 --island_size=1 "
            "--island_master=HOST:PORT");
      return s;  // an island of one
    }
  }
  if (s.size < 1)
    return absl::InvalidArgumentError(absl::StrCat(size_name, "=", s.size, ": must be >= 1"));
  if (s.rank < 0 || s.rank >= s.size)
    return absl::InvalidArgumentError(
        absl::StrCat(rank_name, "=", s.rank, " is outside [0, ", size_name, "=", s.size, ")"));
  if (s.rendezvous_alone && s.size != 1)
    return absl::InvalidArgumentError(absl::StrCat("--island_rendezvous_alone: ", size_name, "=",
                                                   s.size, ", not an island of one"));
  if (absl::Status st = ResolveLocalRank(env, s); !st.ok()) return st;
  if (s.alone()) return s;

  if (!flags.master.empty()) {
    const size_t colon = flags.master.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("--island_master=", flags.master, ": expected HOST:PORT"));
    s.master_host = flags.master.substr(0, colon);
    if (auto st = ParsePort(flags.master.substr(colon + 1), "--island_master", &s.master_port);
        !st.ok())
      return st;
    return s;
  }
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  if (addr == nullptr || *addr == '\0' || port == nullptr || *port == '\0')
    return absl::InvalidArgumentError(absl::StrCat(
        "an island of ", s.size, " ranks (", s.source,
        ") needs its rendezvous address: --island_master=HOST:PORT, or MASTER_ADDR and "
        "MASTER_PORT (rank 0's host and a free port)"));
  s.master_host = addr;
  if (auto st = ParsePort(port, "MASTER_PORT", &s.master_port); !st.ok()) return st;
  return s;
}

}  // namespace diloco::island
