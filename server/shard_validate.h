// The one check of a ShardOptions, made by diloco-server's flags (server/server_flags.cc) and
// Shard::Create: every rule the options must meet, each refusal naming the flag that sets the
// option and its value, so that a bad command line and a bad test setup read alike.
#pragma once

#include "absl/status/status.h"
#include "server/shard.h"

namespace diloco::server {

// OK, or InvalidArgument naming the first bad option ("--quorum=0: ...").
absl::Status Validate(const ShardOptions& o);

}  // namespace diloco::server
