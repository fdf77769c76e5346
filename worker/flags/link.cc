// diloco-worker --help, group "link": The connections to the shards: heartbeats, reconnects, the
// second control connection and the link rate assumed and the margin --codec=auto and
// --inner_steps=auto keep. Read by worker_flags.cc (declared in worker/flags/flags.h).
#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/flags/flags.h"

ABSL_FLAG(double, link_margin, 1.5,
          "--codec=auto, --inner_steps=auto: a round's pushes and updates must cross the link "
          "in at most 1 / margin of the round's step time");
ABSL_FLAG(absl::Duration, heartbeat, absl::Milliseconds(500), "heartbeat period per shard");
ABSL_FLAG(absl::Duration, shard_timeout, absl::Seconds(3),
          "a shard silent this long is reconnected (with exponential backoff)");
ABSL_FLAG(bool, control_channel, true,
          "heartbeats on a second connection per shard, never behind a payload (off only to "
          "diagnose: on a slow link a long transfer then reads as a dead shard)");
ABSL_FLAG(double, link_floor_mbit, 1.0,
          "the data link's rate assumed until one is measured, in Mbit/s: a join or push is asked "
          "for again only after the bytes ahead of its answer could have crossed at the link's "
          "rate (set it to your slowest link's rate if it is below this)");
