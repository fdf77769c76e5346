// A learner's figures as its heartbeats carry them (LearnerFigures in schema/protocol.fbs): the
// plain struct both ends fill and read, and its conversion to and from the FlatBuffers table.
// Absent figures stay nullopt or empty; values are carried as sent (NaN, negative or absurd
// ones included): the shard shows them and never acts on them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "schema/protocol_generated.h"

namespace diloco::wire {

struct LearnerFiguresFields {
  std::optional<uint64_t> step;
  std::optional<float> loss, tokens_per_s, utilization;
  std::string device, codec;
  std::optional<uint32_t> inner_steps;
  std::optional<uint64_t> bytes_sent, bytes_received;
  std::optional<float> mean_staleness;
  std::string host;
};

// Strings longer than this are cut to it, when sent and when read.
inline constexpr size_t kMaxFigureText = 64;

flatbuffers::Offset<LearnerFigures> BuildLearnerFigures(flatbuffers::FlatBufferBuilder& fbb,
                                                        const LearnerFiguresFields& f);
LearnerFiguresFields ReadLearnerFigures(const LearnerFigures& t);

}  // namespace diloco::wire
