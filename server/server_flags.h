// diloco-server's command line: its flags (server_flags.cc; the plan flags are common's) and
// the options they make, checked before anything lasting happens. The enum flags parse into
// the shard's own enums (server/shard.h, server/round_policy.h): a bad value fails at parse
// time naming the choices, and --help lists them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/round_policy.h"
#include "server/shard.h"

namespace diloco::server {

// Everything diloco-server's loop needs besides the shard.
struct ServerOptions {
  ShardOptions shard;
  std::string bind;       // ZeroMQ endpoint
  std::string port_file;  // where the bound endpoint is written ("" none)
  // CURVE: both or neither (checked).
  std::string curve_secret_key_file, curve_authorized_keys;
  std::string metrics_jsonl, audit_jsonl;
  std::string metrics_address;  // Prometheus HOST:PORT ("" none)
  absl::Duration progress_interval;
  uint64_t test_kill_after_applied = 0;  // 0: never
  absl::Duration test_read_delay;        // bound, recovered, not read yet: a slow recovery
};

// The flags as options; an error names the flag and the cause.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// Parses diloco-server's command line (usage errors exit 2; common/plan_flags.h).
void ParseServerFlags(int argc, char** argv);

bool AbslParseFlag(absl::string_view text, Durability* v, std::string* error);
std::string AbslUnparseFlag(Durability v);
bool AbslParseFlag(absl::string_view text, OuterMode* v, std::string* error);
std::string AbslUnparseFlag(OuterMode v);
bool AbslParseFlag(absl::string_view text, MergeRule* v, std::string* error);
std::string AbslUnparseFlag(MergeRule v);
bool AbslParseFlag(absl::string_view text, MergeOrder* v, std::string* error);
std::string AbslUnparseFlag(MergeOrder v);
bool AbslParseFlag(absl::string_view text, RoundNorm* v, std::string* error);
std::string AbslUnparseFlag(RoundNorm v);
bool AbslParseFlag(absl::string_view text, RoundStep* v, std::string* error);
std::string AbslUnparseFlag(RoundStep v);
bool AbslParseFlag(absl::string_view text, WeightScheme* v, std::string* error);
std::string AbslUnparseFlag(WeightScheme v);

}  // namespace diloco::server
