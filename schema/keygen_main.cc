// diloco-keygen: writes a CURVE key pair for the --curve_* flags of diloco-server and
// diloco-worker: PREFIX.secret (mode 0600, keep it on its machine) and PREFIX.public (hand it
// out: the server's to every worker, a worker's to the server's authorized keys file).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/version.h"
#include "schema/curve.h"
#include "schema/wire.h"

ABSL_FLAG(std::string, out, "", "write PREFIX.secret and PREFIX.public");
ABSL_FLAG(int32_t, worker_id, -1,
          "if set, also print the authorized-keys line \"worker_id public-key\" for this key");

int main(int argc, char** argv) {
  diloco::SetVersionFlag("diloco-keygen", diloco::wire::kProtocolVersion);
  absl::SetProgramUsageMessage("diloco-keygen --out=PREFIX [--worker_id=N]");
  absl::ParseCommandLine(argc, argv);
  const std::string prefix = absl::GetFlag(FLAGS_out);
  if (prefix.empty()) {
    std::fprintf(stderr, "diloco-keygen: --out=PREFIX is required\n");
    return 2;
  }
  auto pair = diloco::wire::NewCurveKeyPair();
  if (!pair.ok()) {
    std::fprintf(stderr, "diloco-keygen: %s\n", std::string(pair.status().message()).c_str());
    return 1;
  }
  if (auto s = diloco::wire::WriteKeyPair(prefix, *pair); !s.ok()) {
    std::fprintf(stderr, "diloco-keygen: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (const int32_t id = absl::GetFlag(FLAGS_worker_id); id >= 0)
    std::printf("%d %s\n", id, pair->public_key.c_str());
  else
    std::printf("%s\n", pair->public_key.c_str());
  return 0;
}
