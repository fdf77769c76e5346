#include "worker/data/batcher.h"

#include <sstream>

#include "absl/strings/str_cat.h"

namespace diloco::data {

Batcher::Batcher(std::span<const uint16_t> tokens, int batch, int seq_len, uint64_t seed, int slice,
                 int slices)
    : tokens_(tokens),
      batch_(batch),
      seq_len_(seq_len),
      slice_(slice),
      slices_(slices),
      rng_(seed * 0x2545F4914F6CDD1Dull + 7) {}

void Batcher::Fill(int64_t start, int b, std::span<int32_t> inputs,
                   std::span<int32_t> targets) const {
  const uint16_t* src = tokens_.data() + start;
  int32_t* in = inputs.data() + int64_t(b) * seq_len_;
  int32_t* tg = targets.data() + int64_t(b) * seq_len_;
  for (int t = 0; t < seq_len_; ++t) {
    in[t] = src[t];
    tg[t] = src[t + 1];
  }
}

void Batcher::Next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const uint64_t windows = tokens_.size() - seq_len_;  // valid starts: [0, size - T - 1]
  for (int s = 0; s < slices_; ++s)
    for (int b = 0; b < batch_; ++b) {
      const uint64_t start = rng_() % windows;  // drawn for every slice: the same stream
      if (s == slice_) Fill(static_cast<int64_t>(start), b, inputs, targets);
    }
}

std::string Batcher::Position() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

absl::Status Batcher::SetPosition(std::string_view position) {
  std::istringstream in{std::string(position)};
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail() || !(in >> std::ws).eof())
    return absl::InvalidArgumentError(
        absl::StrCat("data position: not a generator state (", position.size(), " bytes)"));
  rng_ = rng;
  return absl::OkStatus();
}

int64_t Batcher::NumWindows() const {
  return (static_cast<int64_t>(tokens_.size()) - 1) / seq_len_;
}

int64_t Batcher::FixedStart(int64_t i, int b, int64_t batches) const {
  const int64_t windows = NumWindows(), j = i * batch_ + b, n = batches * batch_;
  return (j * windows / n) * seq_len_;
}

int64_t Batcher::NumFixedBatches() const { return NumWindows() / batch_; }

void Batcher::Fixed(int64_t i, int64_t batches, std::span<int32_t> inputs,
                    std::span<int32_t> targets) const {
  for (int b = 0; b < batch_; ++b) Fill(FixedStart(i, b, batches), b, inputs, targets);
}

}  // namespace diloco::data
