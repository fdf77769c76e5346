// Validate: every rule a SyncOptions must meet, written once for diloco-worker's flags, the
// Python learner's keywords and SyncClient::Create.
#include "worker/sync_options.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"

namespace diloco::worker {
namespace {

class Names {
 public:
  explicit Names(OptionNames style) : flags_(style == OptionNames::kFlags) {}
  // The option as the caller spells it: "--carry_max" or "carry_max".
  std::string operator()(absl::string_view option) const {
    return absl::StrCat(flags_ ? "--" : "", option);
  }

 private:
  bool flags_;
};

absl::Status Refuse(const std::string& option, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(option, ": ", why));
}

absl::Status ValidateCadence(const SyncOptions& o, const Names& n) {
  if (o.num_fragments == 0) return Refuse(n("fragments") + "=0", "expected at least one fragment");
  if (o.inner_steps == 0)
    return Refuse(n("inner_steps") + "=0", "expected a positive number of steps");
  if (o.auto_inner_steps && o.inner_steps_max < o.inner_steps)
    return Refuse(absl::StrCat(n("inner_steps_max"), "=", o.inner_steps_max),
                  absl::StrCat("below the smallest H, ", n("inner_steps_min"), "=", o.inner_steps,
                               " (", n("inner_steps"), "=auto)"));
  if (auto st = kernels::ValidateCodec(o.codec); !st.ok())
    return Refuse(n("codec"), std::string(st.message()));
  if (o.auto_codec && o.auto_codecs.empty())
    return Refuse(n("auto_codecs"),
                  absl::StrCat("no codec to choose from (", n("codec"), "=auto)"));
  for (const kernels::Codec& c : o.auto_codecs)
    if (auto st = kernels::ValidateCodec(c); !st.ok())
      return Refuse(n("auto_codecs"), std::string(st.message()));
  if (o.lockstep && (o.auto_codec || o.auto_inner_steps))
    return Refuse(
        absl::StrCat(n("lockstep"), " with ", n(o.auto_codec ? "codec" : "inner_steps"), "=auto"),
        "lockstep runs are deterministic and take a fixed codec and H, not auto (a "
        "choice made from measured rates would differ from run to run)");
  if (o.lockstep_overlap > 0) {
    const std::string overlap = absl::StrCat(n("lockstep_overlap"), "=", o.lockstep_overlap);
    if (!o.lockstep)
      return Refuse(overlap, absl::StrCat("applies to ", n("lockstep"),
                                          " only (an asynchronous worker adopts each answer as "
                                          "it comes)"));
    if (o.lockstep_overlap >= o.inner_steps)
      return Refuse(overlap, absl::StrCat("must be below ", n("inner_steps"), "=", o.inner_steps,
                                          " (a push is adopted before its fragment's next one)"));
  }
  if (!(o.link_margin >= 1))
    return Refuse(absl::StrCat(n("link_margin"), "=", o.link_margin), "expected a factor >= 1");
  return absl::OkStatus();
}

absl::Status ValidateAdoption(const SyncOptions& o, const Names& n) {
  const std::string alpha = absl::StrCat(n("adopt_alpha"), "=", o.adopt_alpha);
  if (o.adopt == SyncOptions::Adopt::kKeep && o.adopt_alpha != 0.0f)
    return Refuse(alpha,
                  absl::StrCat("applies to ", n("adopt"), "=lerp only (", n("adopt"), "=keep)"));
  if (!(o.adopt_alpha >= 0.0f && o.adopt_alpha <= 1.0f)) return Refuse(alpha, "must be in [0, 1]");
  if (!(o.extrapolate >= 1.0f && o.extrapolate <= 3.0f))
    return Refuse(absl::StrCat(n("extrapolate"), "=", o.extrapolate),
                  "must be in [1, 3] (1: the local values stay where the push left them)");
  if (!(o.ef_decay >= 0.0f && o.ef_decay <= 1.0f))
    return Refuse(absl::StrCat(n("ef_decay"), "=", o.ef_decay),
                  "must be in (0, 1] (1 keeps the whole residual), or 0 for the codec's own");
  if (o.carry_max == 0)
    return Refuse(n("carry_max") + "=0",
                  "must be at least 1 (the local steps a push may carry, in units of H)");
  return absl::OkStatus();
}

absl::Status ValidateLink(const SyncOptions& o, const Names& n) {
  if (!(o.link_rate_floor > 0))
    return Refuse(absl::StrCat(n("link_floor_mbit"), "=", o.link_rate_floor * 8 / 1e6),
                  "expected a positive rate");
  if (o.heartbeat <= absl::ZeroDuration() || o.shard_timeout <= o.heartbeat)
    return Refuse(absl::StrCat(n("heartbeat"), "=", absl::FormatDuration(o.heartbeat)),
                  absl::StrCat("must be positive and shorter than ", n("shard_timeout"), "=",
                               absl::FormatDuration(o.shard_timeout)));
  const bool server = !o.curve_server_key.empty();
  if (server != !o.curve_public_key.empty() || server != !o.curve_secret_key.empty())
    return Refuse(absl::StrCat(n("curve_server_key"), " and ", n("curve_secret_key_file")),
                  "CURVE takes both or neither");
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const SyncOptions& o, OptionNames names) {
  const Names n(names);
  if (auto st = ValidateCadence(o, n); !st.ok()) return st;
  if (auto st = ValidateAdoption(o, n); !st.ok()) return st;
  return ValidateLink(o, n);
}

float PushExtrapolation(const SyncOptions& o) {
  if (o.adopt != SyncOptions::Adopt::kKeep) return 1.0f;
  if (o.lockstep && o.lockstep_overlap == 0) return 1.0f;
  return o.extrapolate;
}

bool PushAlignment(const SyncOptions& o) {
  return o.align_pushes && !o.lockstep && o.adopt == SyncOptions::Adopt::kKeep;
}

}  // namespace diloco::worker
