// diloco-worker's flags, declared for worker_flags.cc, which turns them into WorkerOptions.
// Each group is defined in its own file of worker/flags/ because Abseil's --help lists flags
// under the file that defines them: the file names are the groups' headings.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/time/time.h"
#include "worker/worker_flags.h"

// worker/flags/sync.cc
ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(uint32_t, worker_id);
ABSL_DECLARE_FLAG(uint64_t, generation);
ABSL_DECLARE_FLAG(std::string, codec);
ABSL_DECLARE_FLAG(std::string, auto_codecs);
ABSL_DECLARE_FLAG(std::string, inner_steps);
ABSL_DECLARE_FLAG(uint32_t, inner_steps_min);
ABSL_DECLARE_FLAG(uint32_t, inner_steps_max);
ABSL_DECLARE_FLAG(bool, dylu);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(diloco::worker::SyncOptions::Adopt, adopt);
ABSL_DECLARE_FLAG(double, adopt_alpha);
ABSL_DECLARE_FLAG(double, extrapolate);
ABSL_DECLARE_FLAG(bool, align_pushes);
ABSL_DECLARE_FLAG(uint32_t, lockstep_overlap);
ABSL_DECLARE_FLAG(uint32_t, carry_max);
ABSL_DECLARE_FLAG(bool, lockstep);
ABSL_DECLARE_FLAG(bool, error_feedback);
ABSL_DECLARE_FLAG(double, ef_decay);
ABSL_DECLARE_FLAG(absl::Duration, join_timeout);
ABSL_DECLARE_FLAG(bool, train_unjoined);
ABSL_DECLARE_FLAG(absl::Duration, drain_timeout);

// worker/flags/link.cc
ABSL_DECLARE_FLAG(double, link_margin);
ABSL_DECLARE_FLAG(absl::Duration, heartbeat);
ABSL_DECLARE_FLAG(absl::Duration, shard_timeout);
ABSL_DECLARE_FLAG(bool, control_channel);
ABSL_DECLARE_FLAG(double, link_floor_mbit);

// worker/flags/model.cc
ABSL_DECLARE_FLAG(diloco::worker::Device, device);
ABSL_DECLARE_FLAG(absl::Duration, synthetic_step_time);
ABSL_DECLARE_FLAG(int, gpus);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(int64_t, steps);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(int, seq_len);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(std::string, lr_schedule);
ABSL_DECLARE_FLAG(int, warmup_steps);
ABSL_DECLARE_FLAG(double, min_lr_fraction);
ABSL_DECLARE_FLAG(double, lr_cooldown);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(double, adam_beta1);
ABSL_DECLARE_FLAG(double, adam_beta2);
ABSL_DECLARE_FLAG(double, adam_eps);
ABSL_DECLARE_FLAG(double, grad_clip);
ABSL_DECLARE_FLAG(uint64_t, init_seed);
ABSL_DECLARE_FLAG(std::string, init_from);
ABSL_DECLARE_FLAG(std::string, save_model);

// worker/flags/data.cc
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(int, num_workers);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int, eval_batches);
ABSL_DECLARE_FLAG(int64_t, eval_every);

// worker/flags/state.cc
ABSL_DECLARE_FLAG(std::string, state_dir);
ABSL_DECLARE_FLAG(int64_t, state_every);
ABSL_DECLARE_FLAG(int64_t, start_step);

// worker/flags/security.cc
ABSL_DECLARE_FLAG(std::string, curve_server_key);
ABSL_DECLARE_FLAG(std::string, curve_secret_key_file);

// worker/flags/observability.cc
ABSL_DECLARE_FLAG(absl::Duration, progress_interval);
ABSL_DECLARE_FLAG(std::string, metrics_jsonl);
ABSL_DECLARE_FLAG(bool, log_sync_events);

// worker/flags/test_only.cc
ABSL_DECLARE_FLAG(absl::Duration, step_delay);
ABSL_DECLARE_FLAG(double, step_slowdown);
