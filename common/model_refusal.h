// Naming the tensor that keeps a learner out of a fleet. A shard knows only the fingerprint of a
// learner's model (the wire carries no manifest), so it cannot say which tensor differs; the
// learner can, given the shard's model. So a shard that refuses a learner's model (WrongModel,
// or WrongPlan when the model fingerprints differ too) says which model it serves, by
// fingerprint and by its --model value, in a text of a fixed form (ModelRefusal); the refused
// program (diloco-worker) parses it back, loads the shard's --model where it can (the same
// file on a shared path, or a preset) and, when that yields the fingerprint the shard named,
// prints the first differing tensor: its position, name and shape on each side. Where it
// cannot, the text says how to get the answer by hand: `diloco-ctl manifest --diff=SHARDS
// --model=MINE`, SHARDS being the shard's --model or a manifest file written from it
// (`diloco-ctl manifest --model=... --out=shard.json` on the shard's host).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/manifest.h"

namespace diloco {

// The shard's refusal text: "model <learner fp>, this shard serves model <shard fp> (shard's
// --model=<spec>); diloco-ctl manifest --diff=<spec> --model=<yours> names the first
// differing tensor". `shard_spec` may be empty (then neither --model part is written).
std::string ModelRefusal(uint64_t learner_fingerprint, uint64_t shard_fingerprint,
                         const std::string& shard_spec);

struct RefusedModel {
  uint64_t shard_fingerprint = 0;
  std::string shard_spec;  // empty when the shard did not say
};
// The shard's model out of any text holding a ModelRefusal (e.g. a worker's join error).
std::optional<RefusedModel> ParseModelRefusal(absl::string_view text);

// What a refused program adds to a refusal text holding a ModelRefusal, given its own model:
// "first difference: tensor 3: ... in this learner's model, ... in the shard's model" when the
// shard's --model loads here with the shard's fingerprint, otherwise how to find it with
// diloco-ctl. Empty when `text` holds no ModelRefusal.
std::string ExplainModelRefusal(absl::string_view text, const Manifest& mine,
                                const std::string& my_spec);

}  // namespace diloco
