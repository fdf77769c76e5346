#include "server/counter_table.h"

#include "absl/strings/str_cat.h"

namespace diloco::server {
namespace {

constexpr CounterRow kCounters[] = {
    {"rounds", "diloco_rounds_total", "Rounds closed (one Nesterov step each).",
     &ShardCounters::rounds},
    {"bad_messages", "diloco_bad_messages_total", "Messages refused with an Error reply.",
     &ShardCounters::messages_bad},
    {"identity_refused", "diloco_identity_refused_total",
     "Messages whose CURVE key is listed for another worker id.", &ShardCounters::identity_refused},
    {"curve_refused", "diloco_curve_handshakes_refused_total",
     "CURVE handshakes refused: the key is not in --curve_authorized_keys.",
     &ShardCounters::curve_refused},
    {"unroutable", "diloco_unroutable_total", "Replies to workers that had gone.",
     &ShardCounters::unroutable},
    {"bytes_in", "diloco_bytes_in_total", "Bytes received.", &ShardCounters::bytes_in},
    {"bytes_out", "diloco_bytes_out_total", "Payload bytes sent.", &ShardCounters::bytes_out},
    {"updates_full", "diloco_updates_full_total",
     "FragmentUpdates sent as whole fp32 fragments (joins, pulls, workers far behind).",
     &ShardCounters::updates_full},
    {"updates_delta", "diloco_updates_delta_total",
     "FragmentUpdates sent as chains of quantized updates (--download_codec).",
     &ShardCounters::updates_delta},
    {"update_bytes_full", "diloco_update_bytes_full_total",
     "Payload bytes of whole-fragment FragmentUpdates.", &ShardCounters::update_bytes_full},
    {"update_bytes_delta", "diloco_update_bytes_delta_total",
     "Payload bytes of quantized-update FragmentUpdates.", &ShardCounters::update_bytes_delta},
    {"checkpoints", "diloco_checkpoints_total", "Checkpoints written.",
     &ShardCounters::checkpoints},
    {"checkpoint_failures", "diloco_checkpoint_failures_total", "Checkpoint writes that failed.",
     &ShardCounters::checkpoint_failures},
    {"checkpoint_bytes", "diloco_checkpoint_written_bytes_total",
     "Tensor bytes of every checkpoint written.", &ShardCounters::checkpoint_bytes_total},
    {"apply_errors", "diloco_apply_errors_total",
     "Pushes whose decode failed after validation (never expected: a bug).",
     &ShardCounters::apply_errors},
};

constexpr CounterRow kPushOutcomes[] = {
    {"queued", "diloco_pushes_total", "Pushes by outcome.", &ShardCounters::pushes_queued},
    {"duplicate", "diloco_pushes_total", "", &ShardCounters::pushes_duplicate},
    {"stale", "diloco_pushes_total", "", &ShardCounters::pushes_stale},
    {"refused", "diloco_pushes_total", "", &ShardCounters::pushes_refused},
    {"no_credit", "diloco_pushes_total", "", &ShardCounters::pushes_no_credit},
    {"dropped", "diloco_pushes_total", "", &ShardCounters::pushes_dropped},
};

}  // namespace

std::span<const CounterRow> CounterRows() { return kCounters; }
std::span<const CounterRow> PushOutcomeRows() { return kPushOutcomes; }

std::string CounterJsonMembers(const ShardCounters& c) {
  std::string t;
  for (const CounterRow& r : kCounters)
    absl::StrAppend(&t, t.empty() ? "" : ",", "\"", r.json, "\":", c.*r.field);
  absl::StrAppend(&t, ",\"pushes\":{");
  for (const CounterRow& r : kPushOutcomes)
    absl::StrAppend(&t, &r == kPushOutcomes ? "" : ",", "\"", r.json, "\":", c.*r.field);
  absl::StrAppend(&t, "}");
  return t;
}

}  // namespace diloco::server
