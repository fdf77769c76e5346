#include "server/shard_validate.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"

namespace diloco::server {
namespace {

absl::Status Refuse(const std::string& option, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(option, ": ", why));
}

absl::Status ValidateRounds(const ShardOptions& o) {
  if (o.shard >= o.num_shards)
    return Refuse(absl::StrCat("--shard=", o.shard),
                  absl::StrCat("out of range for --shards=", o.num_shards));
  if (o.round.quorum == 0) return Refuse("--quorum=0", "must be at least 1");
  if (o.outer_mode == OuterMode::kDelayedNesterov && o.merge == MergeRule::kRda)
    return Refuse("--merge=rda", "RDA merges a round, and --outer=delayed-nesterov has no rounds");
  if (!(o.sparse_outer.lr > 0 && std::isfinite(o.sparse_outer.lr)))
    return Refuse(absl::StrCat("--sparse_outer_lr=", o.sparse_outer.lr), "must be positive");
  if (o.dn_period < 1)
    return Refuse(absl::StrCat("--dn_period=", o.dn_period),
                  "the Delayed Nesterov period must be at least 1");
  for (const auto& [name, cap] : {std::pair{"--push_steps_cap", o.push_steps_cap},
                                  std::pair{"--push_norm_cap", o.push_norm_cap}})
    if (!(cap == 0 || (cap >= 1 && std::isfinite(cap))))
      return Refuse(absl::StrCat(name, "=", cap), "must be 0 (off) or at least 1 (x the median)");
  if (o.faults && !(o.faults->drop_pushes >= 0 && o.faults->drop_pushes < 1))
    return Refuse(absl::StrCat("--test_drop_pushes=", o.faults->drop_pushes),
                  "the fraction of pushes to drop must be in [0, 1)");
  return absl::OkStatus();
}

absl::Status ValidateServing(const ShardOptions& o) {
  if (o.apply_threads < 0)
    return Refuse(absl::StrCat("--apply_threads=", o.apply_threads), "must be >= 0");
  if (auto st = kernels::ValidateCodec(o.download); !st.ok())
    return Refuse("--download_codec", st.message());
  if (!kernels::EntryOf(o.download).exact && o.download_chain == 0)
    return Refuse("--download_chain=0",
                  "a quantized download (--download_codec other than fp32) needs a chain of at "
                  "least 1 update");
  if (o.download_keyframe_every == 0)
    return Refuse("--download_keyframe_every=0",
                  "must be >= 1 (1: each update from the version "
                  "before)");
  if (o.keep_trains.time < absl::ZeroDuration())
    return Refuse(absl::StrCat("--keep_cut_trains_for=", absl::FormatDuration(o.keep_trains.time)),
                  "must not be negative");
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const ShardOptions& o) {
  if (auto st = ValidateRounds(o); !st.ok()) return st;
  return ValidateServing(o);
}

}  // namespace diloco::server
