// Batches of (inputs, targets), each of shape (B, T) row-major int32: targets are the inputs
// shifted by one token. Training batches are random windows of a token stream, deterministic in
// the seed; held-out batches are fixed, non-overlapping windows spread evenly over the whole
// stream (not its first tokens: a stream of segments from different sources, like the synthetic
// chains, is then covered throughout).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace diloco::data {

class Batcher {
 public:
  // tokens must outlive the batcher and hold at least seq_len + 1 tokens. With slices > 1 the
  // batcher draws batches of batch x slices windows and keeps rows [slice x batch, (slice + 1) x
  // batch) of each: the ranks of an island, each with its slice and the island's seed, train on
  // disjoint rows of the batch one worker with batch x slices would draw (worker/island/).
  Batcher(std::span<const uint16_t> tokens, int batch, int seq_len, uint64_t seed, int slice = 0,
          int slices = 1);

  int batch() const { return batch_; }
  int seq_len() const { return seq_len_; }

  // The next random batch. inputs and targets hold batch * seq_len values.
  void Next(std::span<int32_t> inputs, std::span<int32_t> targets);

  // Where the training stream stands (the generator's state, as text): a learner that stops
  // and continues (worker/resume_state.h) draws the batches it would have drawn next, none
  // twice. SetPosition refuses text that is not such a state and then changes nothing.
  std::string Position() const;
  absl::Status SetPosition(std::string_view position);

  // Held-out batch i of `batches`: window b is window j = i * batch + b of J = batches * batch
  // windows spread evenly over the W whole windows of the stream (see FixedStart).
  void Fixed(int64_t i, int64_t batches, std::span<int32_t> inputs,
             std::span<int32_t> targets) const;
  // The start of window b of held-out batch i of `batches`: floor(j * W / J) * seq_len, with
  // j, J as above and W = NumWindows(). For J <= W the windows never overlap and never wrap;
  // for J > W some windows are taken more than once, as evenly as possible.
  int64_t FixedStart(int64_t i, int b, int64_t batches) const;
  // W: whole windows of seq_len targets in the stream, (tokens - 1) / seq_len.
  int64_t NumWindows() const;
  // How many held-out batches fit without a window taken twice: W / batch.
  int64_t NumFixedBatches() const;

 private:
  void Fill(int64_t start, int b, std::span<int32_t> inputs, std::span<int32_t> targets) const;
  std::span<const uint16_t> tokens_;
  int batch_, seq_len_;
  int slice_, slices_;
  std::mt19937_64 rng_;
};

}  // namespace diloco::data
