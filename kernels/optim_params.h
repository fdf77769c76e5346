// Optimizer hyper-parameters, split out of optim.h so that CUDA translation units (C++17, no
// <span>) share them. Include optim.h in C++ code.
#pragma once

namespace diloco::kernels {

struct NesterovParams {
  float lr = 0.7f;
  float mu = 0.9f;
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

}  // namespace diloco::kernels
