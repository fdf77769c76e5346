// A helper more than one of ShardSession's files (worker/shard_session*.cc) uses; not for users
// of the session (worker/shard_session.h is its interface).
#pragma once

#include <cstdint>

#include "schema/transport.h"

namespace diloco::worker::session_internal {

// The payload bytes before chunk h.chunk_index, which a resumed send leaves out.
inline uint64_t BytesBefore(const wire::HeaderFields& h) {
  if (h.chunk_index == 0) return 0;
  const kernels::Codec codec{static_cast<kernels::CodecKind>(h.codec), h.block, h.topk};
  return wire::PayloadLayout(codec, h.num_elements).chunk(h.chunk_index).byte_offset;
}

}  // namespace diloco::worker::session_internal
