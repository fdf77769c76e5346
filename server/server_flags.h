// diloco-server's command line: its flags (server_flags.cc; the plan flags are common's) and
// the options they make, checked before anything lasting happens. The enum flags parse into
// the shard's own enums (server/shard.h, server/round_policy.h): a bad value fails at parse
// time naming the choices, and --help lists them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/faults.h"
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
  std::string metrics_address;  // Prometheus HOST:PORT ("" none; a bare PORT is 127.0.0.1's)
  // A non-loopback address (--bind, --metrics_address) without CURVE is refused unless
  // --insecure is given; `insecure` is then true and `exposed` names those addresses, which the
  // shard reports at start, in Stats and in /metrics (docs/security.md, "Secure by default").
  bool insecure = false;
  std::vector<std::string> exposed;
  absl::Duration progress_interval;
  // Test only (server/flags/test_only.cc): null unless a test flag asked for a fault.
  std::shared_ptr<const TestFaults> faults;
};

// Whether a listening host stays on this machine: 127.0.0.0/8, ::1 (bracketed or not) or
// localhost. Anything else (0.0.0.0, *, an interface name, another name) is taken as exposed.
bool IsLoopbackHost(absl::string_view host);
// The same for a ZeroMQ endpoint: tcp://HOST:PORT by its host; ipc:// and inproc:// stay on
// this machine; any other transport is taken as exposed.
bool IsLoopbackEndpoint(absl::string_view endpoint);

// The flags as options; an error names the flag and the cause.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// Parses diloco-server's command line (usage errors exit 2; common/plan_flags.h).
void ParseServerFlags(int argc, char** argv);

bool AbslParseFlag(absl::string_view text, Durability* v, std::string* error);
std::string AbslUnparseFlag(Durability v);
bool AbslParseFlag(absl::string_view text, OuterMode* v, std::string* error);
std::string AbslUnparseFlag(OuterMode v);
bool AbslParseFlag(absl::string_view text, OuterChoice* v, std::string* error);
std::string AbslUnparseFlag(OuterChoice v);
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
