// Runs a training job on the CPU and prints held-out loss against the known entropy: the
// default built-in job (the "small" model on the synthetic mixture) unless overridden.
//   model_train_job [preset=default|ci] [steps=N] [lr=X] [batch=B] [seq=T] [model=SPEC]
//                   [threads=N] [eval_every=N] [K=components] [succ=successors] [states=S]
//                   [workers=n] [warmup=N] [decay=N] [wd=X]
// steps defaults to the preset's decay_steps.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/model_source.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/evaluate.h"
#include "worker/model/presets.h"
#include "worker/model/trainer_family.h"

using namespace diloco;
using namespace diloco::model;

int main(int argc, char** argv) {
  TrainerOptions o = DefaultJobOptions();
  int steps = -1, eval_every = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "expected key=value, got %s\n", argv[i]);
      return 2;
    }
    const std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "preset")
      o = v == "ci" ? CiTrainingOptions() : DefaultJobOptions();
    else if (k == "steps")
      steps = std::atoi(v.c_str());
    else if (k == "lr")
      o.adamw.lr = std::atof(v.c_str());
    else if (k == "wd")
      o.adamw.weight_decay = std::atof(v.c_str());
    else if (k == "batch")
      o.batch_size = std::atoi(v.c_str());
    else if (k == "seq")
      o.seq_len = std::atoi(v.c_str());
    else if (k == "threads")
      o.threads = std::atoi(v.c_str());
    else if (k == "eval_every")
      eval_every = std::atoi(v.c_str());
    else if (k == "K")
      o.data.synthetic.components = std::atoi(v.c_str());
    else if (k == "succ")
      o.data.synthetic.successors = std::atoi(v.c_str());
    else if (k == "states")
      o.data.synthetic.states = std::atoi(v.c_str());
    else if (k == "workers")
      o.data.num_workers = std::atoi(v.c_str());
    else if (k == "decay")
      o.decay_steps = std::atoi(v.c_str());
    else if (k == "warmup")
      o.warmup_steps = std::atoi(v.c_str());
    else if (k == "model") {
      // Any family's preset or spec the C++ trainer has (tiny, small, llama-tiny, ...).
      absl::StatusOr<ModelSource> source = LoadModelSource(v);
      absl::StatusOr<TrainerModel> m = source.ok()
                                           ? ResolveTrainerModel(source->family, source->config)
                                           : absl::StatusOr<TrainerModel>(source.status());
      if (!m.ok()) {
        std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
        return 2;
      }
      o.model = *std::move(m);
    } else {
      std::fprintf(stderr, "unknown key %s\n", k.c_str());
      return 2;
    }
  }
  if (steps < 0) steps = o.decay_steps > 0 ? o.decay_steps : 1000;
  absl::StatusOr<double> oracle = HeldoutOracle(o);
  absl::StatusOr<std::unique_ptr<Trainer>> t = MakeCpuTrainer(o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s batch %d seq %d lr %g: held-out entropy %.4f nats/token\n",
              o.model.config.c_str(), o.batch_size, o.seq_len ? o.seq_len : o.model.context,
              o.adamw.lr, oracle.ok() ? *oracle : -1.0);
  const auto start = std::chrono::steady_clock::now();
  double train_s = 0;
  for (int s = 1; s <= steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const float loss = (*t)->Step();
    train_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s % eval_every == 0 || s == steps) {
      const float eval = (*t)->EvalLoss();
      std::printf("step %5d train %.4f held-out %.4f (x%.3f of entropy) %.0f tok/s %.1f s\n", s,
                  loss, eval, oracle.ok() ? eval / *oracle : 0.0,
                  s * (*t)->tokens_per_step() / train_s,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::fflush(stdout);
    }
  }
  return 0;
}
