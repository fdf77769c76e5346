#include "server/counter_table.h"

namespace diloco::server {
namespace {

using enum CounterRow::Show;
using enum CounterRow::Unit;
using enum CounterRow::Detail;

// Progress-line groups.
constexpr int kRoundsGroup = 1, kMessagesGroup = 2, kTrafficGroup = 3, kCheckpointGroup = 4,
              kRareGroup = 5;

constexpr CounterRow kCounters[] = {
    {"rounds", "diloco_rounds_total", "Rounds closed (one Nesterov step each).",
     &ShardCounters::rounds, "rounds {}", kRoundsGroup},
    {"bad_messages", "diloco_bad_messages_total", "Messages refused with an Error reply.",
     &ShardCounters::messages_bad, "bad {}", kMessagesGroup, kAlways, kCount, kRefusalReasons},
    {"identity_refused", "diloco_identity_refused_total",
     "Messages whose CURVE key is listed for another worker id.", &ShardCounters::identity_refused,
     "identity refused {}", kMessagesGroup, kNonzero},
    {"curve_refused", "diloco_curve_handshakes_refused_total",
     "CURVE handshakes refused: the key is not in --curve_authorized_keys.",
     &ShardCounters::curve_refused, "CURVE handshakes refused {}", kRareGroup, kNonzero},
    {"hellos_superseded", "diloco_hellos_superseded_total",
     "Data Hellos refused from a connection the worker has replaced (read after it reconnected).",
     &ShardCounters::hellos_superseded, "superseded hellos {}", kMessagesGroup, kNonzero},
    {"leaves", "diloco_leaves_total",
     "Workers that said Leave: each left the live set and the quorum at once.",
     &ShardCounters::leaves, "left {}", kMessagesGroup, kNonzero},
    {"leaves_repeated", "diloco_leaves_repeated_total",
     "Leaves repeated by a worker that had left (answered again, nothing changed).",
     &ShardCounters::leaves_repeated, "leaves repeated {}", kMessagesGroup, kNonzero},
    {"leaves_refused", "diloco_leaves_refused_total",
     "Leaves refused: a superseded generation, an unbound connection, a payload.",
     &ShardCounters::leaves_refused, "leaves refused {}", kMessagesGroup, kNonzero},
    {"unroutable", "diloco_unroutable_total", "Replies to workers that had gone.",
     &ShardCounters::unroutable, "unroutable {}", kMessagesGroup, kNonzero},
    {"pushes_weight_capped", "diloco_pushes_weight_capped_total",
     "Pushes weighed as holding fewer steps than they claimed (over --push_steps_cap x the "
     "fragment's median).",
     &ShardCounters::pushes_weight_capped, "weight capped {}", kMessagesGroup, kNonzero},
    {"pushes_norm_clipped", "diloco_pushes_norm_clipped_total",
     "Pushes whose delta was scaled down to --push_norm_cap x the fragment's median L2 norm.",
     &ShardCounters::pushes_norm_clipped, "norm clipped {}", kMessagesGroup, kNonzero},
    {"bytes_in", "diloco_bytes_in_total", "Bytes received.", &ShardCounters::bytes_in, "in {}",
     kTrafficGroup, kAlways, kBytes},
    {"bytes_out", "diloco_bytes_out_total", "Payload bytes sent.", &ShardCounters::bytes_out,
     "out {}", kTrafficGroup, kAlways, kBytes},
    {"updates_full", "diloco_updates_full_total",
     "FragmentUpdates sent as whole fp32 fragments (joins, pulls, workers far behind).",
     &ShardCounters::updates_full, "updates full {}", kTrafficGroup, kNonzero},
    {"updates_delta", "diloco_updates_delta_total",
     "FragmentUpdates sent as chains of quantized updates (--download_codec).",
     &ShardCounters::updates_delta, "delta {}", kTrafficGroup, kNonzero},
    {"update_bytes_full", "diloco_update_bytes_full_total",
     "Payload bytes of whole-fragment FragmentUpdates.", &ShardCounters::update_bytes_full,
     "full bytes {}", kTrafficGroup, kNonzero, kBytes},
    {"update_bytes_delta", "diloco_update_bytes_delta_total",
     "Payload bytes of quantized-update FragmentUpdates.", &ShardCounters::update_bytes_delta,
     "delta bytes {}", kTrafficGroup, kNonzero, kBytes},
    {"checkpoints", "diloco_checkpoints_total", "Checkpoints written.", &ShardCounters::checkpoints,
     "checkpoints {}", kCheckpointGroup},
    {"checkpoint_bytes", "diloco_checkpoint_written_bytes_total",
     "Tensor bytes of every checkpoint written.", &ShardCounters::checkpoint_bytes_total,
     "written {}", kCheckpointGroup, kNonzero, kBytes},
    {"checkpoint_failures", "diloco_checkpoint_failures_total", "Checkpoint writes that failed.",
     &ShardCounters::checkpoint_failures, "({} failed)", kCheckpointGroup, kNonzero, kCount,
     kCheckpointError},
    {"apply_errors", "diloco_apply_errors_total",
     "Pushes whose decode failed after validation (never expected: a bug).",
     &ShardCounters::apply_errors, "APPLY ERRORS {}", kRareGroup, kNonzero},
};

constexpr CounterRow kPushOutcomes[] = {
    {"queued", "diloco_pushes_total", "Pushes by outcome.", &ShardCounters::pushes_queued,
     "pushes {}", kMessagesGroup},
    {"duplicate", "diloco_pushes_total", "", &ShardCounters::pushes_duplicate, "dup {}",
     kMessagesGroup},
    {"stale", "diloco_pushes_total", "", &ShardCounters::pushes_stale, "stale {}", kMessagesGroup},
    {"refused", "diloco_pushes_total", "", &ShardCounters::pushes_refused, "refused {}",
     kMessagesGroup, kNonzero},
    {"no_credit", "diloco_pushes_total", "", &ShardCounters::pushes_no_credit, "no credit {}",
     kMessagesGroup, kNonzero},
    {"dropped", "diloco_pushes_total", "", &ShardCounters::pushes_dropped, "dropped {}",
     kMessagesGroup, kNonzero},
};

}  // namespace

std::span<const CounterRow> CounterRows() { return kCounters; }
std::span<const CounterRow> PushOutcomeRows() { return kPushOutcomes; }

nlohmann::ordered_json CounterJson(const ShardCounters& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const CounterRow& r : kCounters) j[r.json] = c.*r.field;
  nlohmann::ordered_json& pushes = j["pushes"] = nlohmann::ordered_json::object();
  for (const CounterRow& r : kPushOutcomes) pushes[r.json] = c.*r.field;
  return j;
}

}  // namespace diloco::server
