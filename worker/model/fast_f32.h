// The float versions of the pointwise layers, as plain loops compiled once per instruction set
// (GCC target_clones: AVX-512, AVX2+FMA, baseline; chosen at load time) over fast_math.h's
// vectorisable tanh and exp. layers.h's templates call them for F = float; the double
// instantiations keep the libm reference code the gradient checks run.
#pragma once

#include <cstdint>

namespace diloco::model::f32 {

// out = gelu(inp) (tanh form).
void GeluForward(float* out, const float* inp, int64_t n);
// dinp += gelu'(inp) * dout (or = when overwrite).
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n, bool overwrite);

// row[0..n) = softmax(row[0..n)) in place (n >= 1); returns nothing else.
void SoftmaxRow(float* row, int n);
// p = softmax(logits) over V; returns -log p[target] from the logits (precise for tiny p).
float SoftmaxCrossEntropyRow(float* p, const float* logits, int target, int V);

// LayerNorm of one row of C values (see layers.h), mean and rstd returned through m and s.
void LayerNormRow(float* y, float* m, float* s, const float* x, const float* w, const float* b,
                  int C, float eps);
// The backward of LayerNormRow, accumulating into dx, dw and db.
void LayerNormRowBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                          const float* w, float m, float s, int C);

}  // namespace diloco::model::f32
