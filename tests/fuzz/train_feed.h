// Feeds a fuzz input, read as a sequence of messages (SplitMessages), through ParseMessage and
// one TrainAssembler, as a shard's receive loop would: every fourth message on a second
// connection, the clock a second on per message, idle trains swept now and then. A train that
// comes out joined must hold exactly its declared number of chunks; anything else traps.
#pragma once

#include <string>

#include "schema/train.h"
#include "tests/fuzz/frame_split.h"

namespace diloco::fuzz {

// Returns the number of whole messages that came out. With `reseal`, each message's header
// frame gets a matching trailer first (ResealHeaderFrame, writing into `data`), so that the
// checks behind the header checksum see the input.
inline int FeedTrains(const uint8_t* data, size_t size, bool reseal = false) {
  wire::TrainAssembler trains;
  absl::Time now = absl::UnixEpoch();
  int whole = 0, k = 0;
  for (auto& frames : SplitMessages(data, size)) {
    if (reseal && !frames.empty()) wire::ResealHeaderFrame(frames[0]);
    const std::string conn = k++ % 4 == 3 ? "d" : "c";
    now += absl::Seconds(1);
    auto m = wire::ParseMessage(std::move(frames));
    if (!m.ok()) {
      trains.Drop(conn);
      continue;
    }
    const uint32_t chunks = m->header().num_chunks();
    auto r = trains.Add(conn, *std::move(m), now);
    if (!r.ok() || !r->has_value()) continue;
    const wire::Message& w = **r;
    if (w.is_chunk() || (chunks > 1 && w.num_payloads() != chunks)) __builtin_trap();
    volatile uint64_t sink = Touch(w);
    (void)sink;
    ++whole;
    if (k % 8 == 0) trains.DropIdleSince(now - absl::Seconds(3));
  }
  return whole;
}

}  // namespace diloco::fuzz
