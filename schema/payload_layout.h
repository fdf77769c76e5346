// How an encoded payload is cut into frames, in one place for every reader and writer of the
// wire: a payload of `numel` values encoded with a codec is a run of chunks of ChunkElements
// values (the last one shorter), each encoded on its own and carried in its own frame; in a
// buffer the chunks lie back to back. A chain of several payloads of the same fragment (a
// FragmentUpdate's quantized updates) repeats this layout once per payload.
//
//   for (const wire::PayloadChunk& c : wire::PayloadLayout(codec, numel))
//     Encode(codec, values.subspan(c.offset, c.count), bytes.subspan(c.byte_offset, c.bytes));
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/codec_kind.h"

namespace diloco::wire {

// Elements per chunk: a whole number of codec blocks, about 1 Mi elements, so that frames stay a
// few MiB (large received zmq frames are freshly mapped memory: slow;
// benchmarks/transport/RESULTS.md).
constexpr uint64_t ChunkElements(uint32_t block) {
  const uint64_t b = block == 0 ? 1 : block;
  return ((uint64_t{1} << 20) + b - 1) / b * b;
}

// One chunk of a payload: values [offset, offset + count) of the fragment, encoded in bytes
// [byte_offset, byte_offset + bytes) of the payload's buffer; index is its frame's number.
struct PayloadChunk {
  uint64_t index = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t byte_offset = 0;
  uint64_t bytes = 0;
};

class PayloadLayout {
 public:
  constexpr PayloadLayout(kernels::Codec codec, uint64_t numel)
      : codec_(codec), numel_(numel), chunk_(ChunkElements(codec.block)) {}

  constexpr uint64_t chunk_elements() const { return chunk_; }
  constexpr uint64_t chunks() const { return (numel_ + chunk_ - 1) / chunk_; }
  // Bytes of the whole payload: every chunk but the last is full.
  constexpr uint64_t bytes() const {
    if (numel_ == 0) return 0;
    const uint64_t full = numel_ / chunk_, rest = numel_ % chunk_;
    return full * kernels::EncodedBytes(codec_, chunk_) +
           (rest ? kernels::EncodedBytes(codec_, rest) : 0);
  }
  // Chunk i (i < chunks()).
  constexpr PayloadChunk chunk(uint64_t i) const {
    const uint64_t offset = i * chunk_;
    return {i, offset, std::min(chunk_, numel_ - offset),
            i * kernels::EncodedBytes(codec_, chunk_),
            kernels::EncodedBytes(codec_, std::min(chunk_, numel_ - offset))};
  }

  class iterator {
   public:
    constexpr iterator(const PayloadLayout* l, uint64_t i) : l_(l), i_(i) {}
    constexpr PayloadChunk operator*() const { return l_->chunk(i_); }
    constexpr iterator& operator++() {
      ++i_;
      return *this;
    }
    constexpr bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    const PayloadLayout* l_;
    uint64_t i_;
  };
  constexpr iterator begin() const { return {this, 0}; }
  constexpr iterator end() const { return {this, chunks()}; }

 private:
  kernels::Codec codec_;
  uint64_t numel_;
  uint64_t chunk_;
};

}  // namespace diloco::wire
