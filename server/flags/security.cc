// diloco-server --help, group "security": CURVE keys and --insecure (docs/security.md).
// Read by server_flags.cc (declared in server/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "server/flags/flags.h"

ABSL_FLAG(std::string, curve_secret_key_file, "",
          "CURVE: this server's secret key file (diloco-keygen); empty: no encryption");
ABSL_FLAG(std::string, curve_authorized_keys, "",
          "CURVE: file of \"worker_id z85-public-key\" lines; only these keys may connect, and "
          "each only as its worker id (required with --curve_secret_key_file)");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --bind or --metrics_address without CURVE keys: plaintext, and "
          "anyone who reaches the port can read the model and push as any worker (reported at "
          "start, in Stats as \"insecure\" and as the diloco_insecure gauge)");
