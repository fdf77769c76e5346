// diloco-ctl stats: asks a running shard for its live statistics (the Stats message) and
// prints the JSON object it answers with, on one line (pipe it to jq to read it laid out); an
// answer that is not a JSON object is an error. A shard with CURVE answers a client whose key it
// lists (--curve_server_key and --curve_secret_key_file, as for diloco-worker).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "ctl/commands.h"
#include "schema/transport.h"

ABSL_FLAG(std::string, server, "", "stats: the shard's endpoint, tcp://HOST:PORT");
ABSL_FLAG(int, timeout_ms, 5000, "stats: how long to wait for the answer");
ABSL_FLAG(std::string, curve_server_key, "",
          "stats: a CURVE shard's public key (Z85 text or a file holding it)");
ABSL_FLAG(std::string, curve_secret_key_file, "",
          "stats: a secret key file whose public key the CURVE shard lists (any worker's)");

namespace diloco::ctl {

int Stats(const Args& args) {
  if (!args.empty()) return Usage("stats takes no arguments, only flags");
  const std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) return Usage("stats needs --server=tcp://HOST:PORT");
  const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms <= 0) return Usage("--timeout_ms must be positive");
  auto curve = wire::CurveClientKeysFrom(absl::GetFlag(FLAGS_curve_server_key),
                                         absl::GetFlag(FLAGS_curve_secret_key_file));
  if (!curve.ok()) return Usage(std::string(curve.status().message()));
  auto stats = wire::RequestStats(server, absl::Milliseconds(timeout_ms),
                                  curve->has_value() ? &**curve : nullptr);
  if (!stats.ok()) return Fail(stats.status());
  const auto json = nlohmann::ordered_json::parse(*stats, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return Fail(absl::DataLossError(
        absl::StrCat("the shard's Stats answer is not a JSON object: ", *stats)));
  std::printf("%s\n", JsonDump(json).c_str());
  return 0;
}

}  // namespace diloco::ctl
