#include "common/manifest_diff.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor_decl.h"

namespace diloco {

std::optional<std::string> FirstDifference(const Manifest& a, const std::string& a_label,
                                           const Manifest& b, const std::string& b_label) {
  const auto& ta = a.tensors();
  const auto& tb = b.tensors();
  const size_t common = std::min(ta.size(), tb.size());
  for (size_t i = 0; i < common; ++i)
    if (ta[i].name != tb[i].name || ta[i].shape != tb[i].shape)
      return absl::StrCat("tensor ", i, ": ", ta[i].name, " ", ShapeString(ta[i].shape), " in ",
                          a_label, ", ", tb[i].name, " ", ShapeString(tb[i].shape), " in ",
                          b_label);
  if (ta.size() == tb.size()) return std::nullopt;
  const bool a_longer = ta.size() > tb.size();
  const TensorSpec& extra = a_longer ? ta[common] : tb[common];
  return absl::StrCat("tensor ", common, ": ", extra.name, " ", ShapeString(extra.shape), " in ",
                      a_longer ? a_label : b_label, "; ", a_longer ? b_label : a_label,
                      " ends after ", common, " tensors");
}

}  // namespace diloco
