// Offsets (in floats) of one transformer block's tensors in the flat parameter buffer. Plain
// C++17 so the CUDA sources can include it.
#pragma once

#include <cstdint>

namespace diloco::model {

struct LayerOffsets {
  uint64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb;
  uint64_t ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

}  // namespace diloco::model
