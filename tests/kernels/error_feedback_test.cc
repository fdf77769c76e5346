// Error feedback does not drift: over many pushes, the sum of what was sent (dequantized) stays
// within one quantization step of the sum of the true deltas. Without error feedback it does
// drift, which this test also shows (so it can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/codec.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

struct Drift {
  double max_abs_gap = 0.0;     // max_i |sum sent - sum true|
  double max_step_ratio = 0.0;  // max_i |gap_i| / (quantization step of i's last block)
};

Drift RunPushes(Codec c, bool feedback) {
  const size_t n = 4096;
  const int pushes = 1000;
  std::vector<double> sum_true(n, 0.0), sum_sent(n, 0.0);
  std::vector<float> err(n, 0.0f), dec(n);
  std::vector<uint8_t> enc(EncodedSize(c, n));
  std::vector<float> last_scale(n / c.block);
  for (int p = 0; p < pushes; ++p) {
    const std::vector<float> delta = testing::Gaussian(n, 1000 + p, 0.01f);
    if (feedback) {
      EXPECT_TRUE(ErrorFeedbackEncode(c, delta, err, enc).ok());
    } else {
      EXPECT_TRUE(Encode(c, delta, enc).ok());
    }
    EXPECT_TRUE(Decode(c, enc, dec).ok());
    for (size_t i = 0; i < n; ++i) {
      sum_true[i] += delta[i];
      sum_sent[i] += dec[i];
    }
    std::memcpy(last_scale.data(), enc.data(), last_scale.size() * 4);
  }
  Drift d;
  for (size_t i = 0; i < n; ++i) {
    const double gap = std::fabs(sum_sent[i] - sum_true[i]);
    d.max_abs_gap = std::max(d.max_abs_gap, gap);
    d.max_step_ratio = std::max(d.max_step_ratio, gap / last_scale[i / c.block]);
  }
  return d;
}

TEST(ErrorFeedback, Int8NoDrift) {
  const Codec c{CodecKind::kInt8, 256};
  const Drift with = RunPushes(c, true);
  EXPECT_LE(with.max_step_ratio, 1.0) << "gap " << with.max_abs_gap;
  const Drift without = RunPushes(c, false);
  EXPECT_GT(without.max_step_ratio, 2.0) << "control: plain quantization drifts";
}

TEST(ErrorFeedback, Int4NoDrift) {
  const Codec c{CodecKind::kInt4, 128};
  const Drift with = RunPushes(c, true);
  EXPECT_LE(with.max_step_ratio, 1.0) << "gap " << with.max_abs_gap;
  const Drift without = RunPushes(c, false);
  EXPECT_GT(without.max_step_ratio, 2.0) << "control: plain quantization drifts";
}

}  // namespace
}  // namespace diloco::kernels
