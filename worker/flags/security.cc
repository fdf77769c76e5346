// diloco-worker --help, group "security": CURVE: the shards' public key and this worker's secret
// key. Read by worker_flags.cc (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "worker/flags/flags.h"

ABSL_FLAG(std::string, curve_server_key, "",
          "CURVE: the shards' public key (Z85 text or a file holding it); empty: no encryption");
ABSL_FLAG(std::string, curve_secret_key_file, "",
          "CURVE: this worker's secret key file (diloco-keygen); its public key must be listed "
          "for --worker_id in the shards' --curve_authorized_keys");
