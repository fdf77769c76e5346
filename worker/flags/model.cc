// diloco-worker --help, group "model": Where and how the model trains: the device, theta(0) (seed
// or file), the inner optimizer (AdamW), the learning-rate schedule, the run's length and the model
// saved at the end. Read by worker_flags.cc (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/flags/flags.h"

using diloco::worker::Device;

ABSL_FLAG(Device, device, Device::kCpu,
          "cpu; cuda: train on this node's GPUs (cuBLAS; --gpus data-parallel with NCCL); or "
          "synthetic: no model math, each step waits --synthetic_step_time and moves 1/H of the "
          "parameters by a seeded perturbation (benchmarks; no held-out evaluation)");
ABSL_FLAG(absl::Duration, synthetic_step_time, absl::Milliseconds(100),
          "--device=synthetic: the time one inner step waits (a GPU island computing)");
ABSL_FLAG(int, gpus, 1, "--device=cuda: GPUs of this worker (--batch sequences on each)");
ABSL_FLAG(int, threads, 1, "CPU threads for the model's matrix products and attention");
ABSL_FLAG(int64_t, steps, 0, "inner steps to run (0: until --duration or a signal)");
ABSL_FLAG(absl::Duration, duration, absl::InfiniteDuration(), "stop after this long");
ABSL_FLAG(int, batch, 8, "sequences per inner step");
ABSL_FLAG(int, seq_len, 0, "tokens per sequence (0: the model's context)");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate (the peak of --lr_schedule)");
ABSL_FLAG(std::string, lr_schedule, "auto",
          "auto (cosine when --steps or --duration bounds the run, constant otherwise), "
          "constant, cosine (decay to --min_lr_fraction of --lr over the run, following the "
          "larger of steps/--steps and elapsed/--duration) or wsd (the peak, then a linear "
          "decay over the last --lr_cooldown of the run)");
ABSL_FLAG(int, warmup_steps, 0, "linear learning-rate warm-up over this many inner steps");
ABSL_FLAG(double, min_lr_fraction, 0.1, "the decay's floor, as a fraction of --lr");
ABSL_FLAG(double, lr_cooldown, 0.2, "--lr_schedule=wsd: the last fraction of the run decays");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay");
ABSL_FLAG(double, adam_beta1, 0.9, "AdamW beta1 (first-moment decay)");
ABSL_FLAG(double, adam_beta2, 0.95, "AdamW beta2 (second-moment decay)");
ABSL_FLAG(double, adam_eps, 1e-8, "AdamW epsilon");
ABSL_FLAG(double, grad_clip, 1.0, "clip the global gradient norm to this (0: off)");
ABSL_FLAG(uint64_t, init_seed, 0,
          "seed of theta(0) (0: --seed). Workers of one fleet that train with different --seed "
          "and one --init_seed start from the same theta(0), whichever Init reaches a shard first");
ABSL_FLAG(std::string, init_from, "",
          "start from this model: a .safetensors file or a Hugging Face folder (config.json "
          "beside model.safetensors or a sharded index) holding --model's tensors under their "
          "own names (the built-in GPT also in Hugging Face's GPT-2 layout); any float dtype, "
          "widened to fp32. Uploaded as theta(0) where the fleet has none; a fleet that already "
          "has theta(0) keeps it, and a warning says so");
ABSL_FLAG(std::string, save_model, "",
          "at the end (after the drain), write this worker's local model to this .safetensors "
          "file, with the tensor names and layout of diloco-ctl export (so an unsynced baseline "
          "is evaluated like the fleet's export: diloco-ctl eval --params=FILE)");
