// The synthetic learner (diloco-worker --device=synthetic): a Trainer with a real model's
// manifest that does no model math, so that a fleet of many learners, or one of a model far
// larger than the CPU could train, can be driven through the sync path on one machine
// (benchmarks/fleet/diloco-bench). Each Step() waits the step time (a GPU island computing,
// without using this machine's CPU), then moves a rotating window of numel/H parameters by a
// seeded perturbation of at most the learning rate (about what an AdamW step moves a parameter):
// over any H consecutive steps every parameter moves exactly once, so each push carries a
// realistic non-zero delta, at a CPU cost of numel/H adds per step. It holds only the
// parameters (4 bytes each) and has no data and no held-out set: EvalLoss() is NaN, and the
// worker runs no evaluation in this mode. It takes any manifest (a Llama's, a Qwen's: real
// shapes without their compute), not only the built-in GPT's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "worker/trainer.h"

namespace diloco::model {

struct SyntheticOptions {
  // The tensors (any model: a family's preset, --model=hf:DIR, manifest:PATH, ...); at least
  // one element.
  Manifest manifest;
  int vocab = 256;            // the "loss" a step reports: ln(vocab), easing towards half of it
  uint32_t inner_steps = 50;  // H: steps for the window to go round once
  absl::Duration step_time = absl::Milliseconds(100);  // waited at the start of each Step()
  uint64_t seed = 1234;                                // perturbations and initial values
  float lr = 1e-3f;                                    // largest move of a parameter in one step
  uint64_t tokens_per_step = 0;                        // reported only (batch x sequence length)
  // How Step() waits; tests inject one that records instead of sleeping.
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
};

absl::StatusOr<std::unique_ptr<Trainer>> MakeSyntheticTrainer(SyntheticOptions options);

}  // namespace diloco::model
