#include "common/model_refusal.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/manifest_diff.h"
#include "common/model_source.h"

namespace diloco {
namespace {

constexpr absl::string_view kServes = "this shard serves model ";
constexpr absl::string_view kSpec = " (shard's --model=";
constexpr absl::string_view kSpecEnd = "); diloco-ctl manifest --diff=";

}  // namespace

std::string ModelRefusal(uint64_t learner_fingerprint, uint64_t shard_fingerprint,
                         const std::string& shard_spec) {
  std::string s =
      absl::StrFormat("model %016x, %s%016x", learner_fingerprint, kServes, shard_fingerprint);
  if (shard_spec.empty())
    return absl::StrCat(s,
                        "; diloco-ctl manifest --diff=<the shard's --model> --model=<yours> "
                        "names the first differing tensor");
  return absl::StrCat(s, kSpec, shard_spec, kSpecEnd, shard_spec,
                      " --model=<yours> names the first differing tensor");
}

std::optional<RefusedModel> ParseModelRefusal(absl::string_view text) {
  const size_t at = text.rfind(kServes);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = text.substr(at + kServes.size());
  RefusedModel r;
  if (rest.size() < 16 || !absl::SimpleHexAtoi(rest.substr(0, 16), &r.shard_fingerprint))
    return std::nullopt;
  rest.remove_prefix(16);
  if (rest.substr(0, kSpec.size()) != kSpec) return r;
  rest.remove_prefix(kSpec.size());
  const size_t end = rest.find(kSpecEnd);
  if (end == absl::string_view::npos) return r;
  r.shard_spec = std::string(rest.substr(0, end));
  return r;
}

std::string ExplainModelRefusal(absl::string_view text, const Manifest& mine,
                                const std::string& my_spec) {
  const std::optional<RefusedModel> r = ParseModelRefusal(text);
  if (!r) return "";
  const std::string how = absl::StrCat(
      "diloco-ctl manifest --diff=",
      r->shard_spec.empty() ? "<the shard's --model>" : r->shard_spec, " --model=", my_spec,
      " names the first differing tensor (where the shard's --model is not "
      "readable here, write its manifest on the shard's host with diloco-ctl manifest "
      "--model=... --out=shard.json and pass --diff=manifest:shard.json)");
  if (r->shard_spec.empty()) return how;
  absl::StatusOr<ModelSource> theirs = LoadModelSource(r->shard_spec);
  if (!theirs.ok() || theirs->manifest.fingerprint() != r->shard_fingerprint)
    return absl::StrCat("the shard's --model=", r->shard_spec,
                        theirs.ok() ? " reads differently here" : " is not readable here", "; ",
                        how);
  const std::optional<std::string> diff =
      FirstDifference(mine, "this learner's model", theirs->manifest, "the shard's model");
  if (!diff) return how;  // same tensors, other fingerprint: cannot happen, but say something
  return absl::StrCat("first difference: ", *diff);
}

}  // namespace diloco
