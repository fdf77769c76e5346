// diloco-server's flags, declared for server_flags.cc, which turns them into ServerOptions.
// Each group is defined in its own file of server/flags/ because Abseil's --help lists flags
// under the file that defines them: the file names are the groups' headings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/faults.h"
#include "server/server_flags.h"

// server/flags/serving.cc
ABSL_DECLARE_FLAG(std::string, bind);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(uint32_t, shard);
ABSL_DECLARE_FLAG(int, apply_threads);
ABSL_DECLARE_FLAG(uint64_t, worker_credit_mib);
ABSL_DECLARE_FLAG(absl::Duration, keep_cut_trains_for);
ABSL_DECLARE_FLAG(uint64_t, keep_cut_trains_mib);
ABSL_DECLARE_FLAG(std::string, download_codec);
ABSL_DECLARE_FLAG(uint32_t, download_chain);
ABSL_DECLARE_FLAG(uint32_t, download_keyframe_every);
ABSL_DECLARE_FLAG(absl::Duration, worker_timeout);

// server/flags/rounds.cc
ABSL_DECLARE_FLAG(uint32_t, quorum);
ABSL_DECLARE_FLAG(bool, elastic_quorum);
ABSL_DECLARE_FLAG(absl::Duration, grace_cap);
ABSL_DECLARE_FLAG(double, grace_gamma);
ABSL_DECLARE_FLAG(diloco::server::WeightScheme, weights);
ABSL_DECLARE_FLAG(double, staleness_alpha);
ABSL_DECLARE_FLAG(uint64_t, max_staleness);
ABSL_DECLARE_FLAG(double, push_steps_cap);
ABSL_DECLARE_FLAG(double, push_norm_cap);
ABSL_DECLARE_FLAG(diloco::server::OuterMode, outer);
ABSL_DECLARE_FLAG(int, dn_period);
ABSL_DECLARE_FLAG(diloco::server::MergeRule, merge);
ABSL_DECLARE_FLAG(diloco::server::MergeOrder, merge_order);
ABSL_DECLARE_FLAG(diloco::server::RoundNorm, round_norm);
ABSL_DECLARE_FLAG(diloco::server::RoundStep, round_step);
ABSL_DECLARE_FLAG(diloco::server::OuterChoice, outer_step);
ABSL_DECLARE_FLAG(double, outer_lr);
ABSL_DECLARE_FLAG(double, outer_momentum);
ABSL_DECLARE_FLAG(double, sparse_outer_lr);

// server/flags/storage.cc
ABSL_DECLARE_FLAG(std::string, store);
ABSL_DECLARE_FLAG(bool, accept_store_rollback);
ABSL_DECLARE_FLAG(diloco::server::Durability, durability);
ABSL_DECLARE_FLAG(uint32_t, checkpoint_every_rounds);
ABSL_DECLARE_FLAG(absl::Duration, checkpoint_interval);

// server/flags/security.cc
ABSL_DECLARE_FLAG(std::string, curve_secret_key_file);
ABSL_DECLARE_FLAG(std::string, curve_authorized_keys);
ABSL_DECLARE_FLAG(bool, insecure);

// server/flags/observability.cc
ABSL_DECLARE_FLAG(absl::Duration, progress_interval);
ABSL_DECLARE_FLAG(std::string, metrics_jsonl);
ABSL_DECLARE_FLAG(std::string, audit_jsonl);
ABSL_DECLARE_FLAG(std::string, metrics_address);

namespace diloco::server {

// The faults of the test-only group (server/flags/test_only.cc); null when none is set (a
// production run). An error names a bad value.
absl::StatusOr<std::shared_ptr<const TestFaults>> TestFaultsFromFlags();

}  // namespace diloco::server
