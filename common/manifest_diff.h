// Where two manifests part: the first tensor, in manifest order, whose name or shape differs,
// or the first tensor one has beyond the other's end. A learner refused for its model (a
// different plan or model fingerprint) is told this one tensor, which is nearly always the
// whole story (a wrong size, a missing tied head, another naming scheme).
#pragma once

#include <optional>
#include <string>

#include "common/manifest.h"

namespace diloco {

// nullopt when `a` and `b` declare the same tensors (then their fingerprints are equal).
// Otherwise one line naming the position, the tensor and its shape in each, e.g.
//   tensor 3: h.0.attn.c_attn.weight [384,128] in <a_label>, h.0.attn.c_attn.weight [192,64]
//   in <b_label>
std::optional<std::string> FirstDifference(const Manifest& a, const std::string& a_label,
                                           const Manifest& b, const std::string& b_label);

}  // namespace diloco
