// Ready-made trainer options. DefaultJobOptions is the built-in job: the "small" model on the
// synthetic Markov mixture, sized to approach the known entropy within about a minute on two
// CPU cores (K=4 chains over 64 of the 256 tokens). CiTrainingOptions is a smaller job for
// tests: the tiny model, K=2 chains over 32 tokens, decay_steps steps, under a minute on two
// cores. Both train with a cosine-decayed learning rate over decay_steps.
#pragma once

#include "worker/model/trainer_options.h"

namespace diloco::model {

TrainerOptions DefaultJobOptions();
TrainerOptions CiTrainingOptions();

}  // namespace diloco::model
