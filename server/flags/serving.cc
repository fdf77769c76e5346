// diloco-server --help, group "serving": Where the shard listens and how it serves pushes and
// downloads: its socket and index, the merge threads, flow control, cut push trains, the download
// codec and when a worker counts as live. Read by server_flags.cc (declared in
// server/flags/flags.h).
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags/flags.h"

ABSL_FLAG(std::string, bind, "tcp://127.0.0.1:5555",
          "ZeroMQ endpoint to bind; a port of * picks a free one (see --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound endpoint here once listening");
ABSL_FLAG(uint32_t, shard, 0, "this shard's index, 0 .. --shards-1");
ABSL_FLAG(int, apply_threads, 2,
          "threads that decode and merge pushes, pinned by fragment (0: on the I/O thread)");
ABSL_FLAG(uint64_t, worker_credit_mib, 1024,
          "flow control: push MiB one worker may have held in open rounds at once (one push is "
          "always allowed); 0 = no byte limit beyond one push per fragment");
ABSL_FLAG(absl::Duration, keep_cut_trains_for, absl::Minutes(5),
          "a push train cut by a lost connection is kept this long for the worker to resume "
          "from its first missing chunk after reconnecting (docs/protocol.md, \"Trains\")");
ABSL_FLAG(uint64_t, keep_cut_trains_mib, 256,
          "the most MiB of cut push trains kept at once, the oldest dropped first beyond it; "
          "0 keeps none (a cut push is sent again whole)");
ABSL_FLAG(std::string, download_codec, "int8",
          "how new versions travel to workers: fp32 (whole fragments), or int8 / int4 [:block] "
          "(quantized updates from the previous version, error feedback on the shard; joins and "
          "pulls still get whole fragments)");
ABSL_FLAG(uint32_t, download_chain, 4,
          "quantized downloads: updates kept per fragment for workers a few versions behind");
ABSL_FLAG(uint32_t, download_keyframe_every, 8,
          "quantized downloads: every this many versions a keyframe (and every version made "
          "while all live workers hold the newest published one), each update taken from the last "
          "keyframe, so a worker several versions behind takes one update and one per keyframe "
          "it crossed (docs/protocol.md, \"Keyframes\"); 1: each update from the version before");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10),
          "a worker silent this long is not live");
