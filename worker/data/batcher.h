// Batches of (inputs, targets), each of shape (B, T) row-major int32: targets are the inputs
// shifted by one token. Training batches are random windows of a token stream, deterministic in
// the seed; held-out batches are fixed, consecutive, non-overlapping windows.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace diloco::data {

class Batcher {
 public:
  // tokens must outlive the batcher and hold at least seq_len + 1 tokens.
  Batcher(std::span<const uint16_t> tokens, int batch, int seq_len, uint64_t seed);

  int batch() const { return batch_; }
  int seq_len() const { return seq_len_; }

  // The next random batch. inputs and targets hold batch * seq_len values.
  void Next(std::span<int32_t> inputs, std::span<int32_t> targets);

  // Held-out batch i: windows starting at (i * batch + b) * seq_len, wrapping around the stream.
  void Fixed(int64_t i, std::span<int32_t> inputs, std::span<int32_t> targets) const;
  // The start of window b of held-out batch i (for oracle losses).
  int64_t FixedStart(int64_t i, int b) const;
  // How many held-out batches fit without wrapping.
  int64_t NumFixedBatches() const;

 private:
  void Fill(int64_t start, int b, std::span<int32_t> inputs, std::span<int32_t> targets) const;
  std::span<const uint16_t> tokens_;
  int batch_, seq_len_;
  std::mt19937_64 rng_;
};

}  // namespace diloco::data
