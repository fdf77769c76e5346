#include "worker/cadence.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/codec.h"

namespace diloco::worker {

absl::Status ParseCadence(const CadenceText& t, SyncOptions& so) {
  SyncOptions out = so;
  out.auto_codec = t.codec == "auto";
  out.auto_codecs.clear();
  if (out.auto_codec) {
    for (absl::string_view name : absl::StrSplit(t.auto_codecs, ',', absl::SkipEmpty())) {
      auto c = kernels::ParseCodec(std::string(name));
      if (!c.ok())
        return absl::InvalidArgumentError(absl::StrCat(t.what_codec, "=auto: codec ", name,
                                                       " to choose from: ", c.status().message()));
      out.auto_codecs.push_back(*c);
    }
    if (out.auto_codecs.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(t.what_codec, "=auto: no codec to choose from"));
    out.codec = out.auto_codecs.front();
  } else {
    auto c = kernels::ParseCodec(std::string(t.codec));
    if (!c.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(t.what_codec, "=", t.codec, ": ", c.status().message()));
    out.codec = *c;
  }
  out.auto_inner_steps = t.inner_steps == "auto";
  if (out.auto_inner_steps) {
    if (t.h_min == 0 || t.h_max < t.h_min)
      return absl::InvalidArgumentError(absl::StrCat(t.what_h,
                                                     "=auto: expected 1 <= the smallest H (",
                                                     t.h_min, ") <= the largest (", t.h_max, ")"));
    out.inner_steps = t.h_min;
    out.inner_steps_max = t.h_max;
  } else if (!absl::SimpleAtoi(t.inner_steps, &out.inner_steps) || out.inner_steps == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.what_h, "=", t.inner_steps, ": expected a positive number of steps or auto"));
  } else {
    out.inner_steps_max = out.inner_steps;
  }
  so = std::move(out);
  return absl::OkStatus();
}

}  // namespace diloco::worker
