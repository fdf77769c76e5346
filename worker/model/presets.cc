#include "worker/model/presets.h"

#include "worker/model/gpt/gpt_trainer_family.h"

namespace diloco::model {

TrainerOptions DefaultJobOptions() {
  TrainerOptions o;
  o.model = GptTrainerModel(
      GptConfig{.vocab = 256, .context = 128, .layers = 4, .heads = 4, .width = 128});
  o.batch_size = 8;
  o.seq_len = 128;
  o.adamw.lr = 1e-2f;
  o.warmup_steps = 20;
  o.decay_steps = 1500;
  o.data.kind = data::DataKind::kSynthetic;
  o.data.synthetic.components = 4;
  o.data.synthetic.states = 64;
  o.eval_batches = 8;
  return o;
}

TrainerOptions CiTrainingOptions() {
  TrainerOptions o;
  o.model =
      GptTrainerModel(GptConfig{.vocab = 256, .context = 64, .layers = 2, .heads = 4, .width = 64});
  o.batch_size = 8;
  o.seq_len = 64;
  o.adamw.lr = 1e-2f;
  o.warmup_steps = 20;
  o.decay_steps = 800;  // the test trains exactly this many steps
  o.data.kind = data::DataKind::kSynthetic;
  o.data.synthetic.components = 2;
  o.data.synthetic.states = 32;
  o.data.train_tokens = int64_t{1} << 20;
  // 66 whole segments (33 per chain) and one token: the held-out windows meet both chains
  // equally and sit inside segments as the stream does (see DataOptions::heldout_tokens; 2^16
  // tokens put nearly every window across a chain switch it cannot predict).
  o.data.heldout_tokens = int64_t{66} * 1024 + 1;
  o.eval_batches = 8;
  return o;
}

}  // namespace diloco::model
