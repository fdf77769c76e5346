// diloco-ctl stats: asks a running shard for its live statistics (the Stats message) and
// prints the JSON it answers with. A shard with CURVE answers a client whose key it lists
// (--curve_server_key and --curve_secret_key_file, as for diloco-worker).
#include <cstdio>
#include <zmq.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ctl/commands.h"
#include "schema/transport.h"

namespace diloco::ctl {

int Stats(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"server", "timeout_ms", "curve_server_key", "curve_secret_key_file"},
                 &flags, &pos, &error))
    return Usage(error);
  if (flags["server"].empty()) return Usage("stats needs --server=tcp://HOST:PORT");
  int timeout_ms = 5000;
  if (flags.count("timeout_ms") && !absl::SimpleAtoi(flags["timeout_ms"], &timeout_ms))
    return Usage("--timeout_ms must be an integer");
  auto curve = wire::CurveClientKeysFrom(flags["curve_server_key"], flags["curve_secret_key_file"]);
  if (!curve.ok()) return Usage(std::string(curve.status().message()));
  auto stats = wire::RequestStats(flags["server"], absl::Milliseconds(timeout_ms),
                                  curve->has_value() ? &**curve : nullptr);
  if (!stats.ok()) return Fail(stats.status());
  std::printf("%s\n", stats->c_str());
  return 0;
}

}  // namespace diloco::ctl
