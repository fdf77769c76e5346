// Branch-free float tanh and exp made of multiplies, adds and a division, so that loops calling
// them vectorise (libm's tanhf/expf are scalar calls: GELU through tanhf was a third of a CPU
// training step). Accuracy: tanh within 4e-7 absolute (a few ulp near +-1), exp within 2 ulp
// over the range softmax uses (inputs <= 0); float rounding, not a different function.
#pragma once

#include <cstdint>
#include <cstring>

namespace diloco::model {

// Rational minimax approximation of tanh on [-7.9, 7.9] (the coefficients of Eigen's
// generic_fast_tanh_float); outside it tanh is +-1 in float.
inline float FastTanh(float a) {
  const float c = 7.90531110763549805f;
  const float x = a < -c ? -c : (a > c ? c : a);
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  p = x * p;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return p / q;
}

// exp(x) for x in [-87, 88]; smaller x gives ~0 (flushed below 2^-126), as softmax needs.
// x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial (Cephes expf), times 2^n.
inline float FastExp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;  // ln2 split in two for an exact n * ln2_hi
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace diloco::model
