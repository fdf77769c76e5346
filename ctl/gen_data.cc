// diloco-ctl gen-data: writes the built-in synthetic text (a mixture of sparse Markov chains
// with an exactly known entropy rate) as an llm.c .bin token file, and prints its entropy.
// --heldout writes exactly diloco-worker's default held-out stream (what `diloco-ctl eval
// --data=synthetic` and the workers evaluate windows of), so any model can be evaluated on it
// from a file.
#include <cstdio>

#include "absl/strings/numbers.h"
#include "ctl/commands.h"
#include "worker/data/markov.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"

namespace diloco::ctl {

int GenData(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"out", "tokens", "worker", "workers", "seed"}, &flags, &pos, &error,
                 {"heldout"}))
    return Usage(error);
  if (flags["out"].empty()) return Usage("gen-data needs --out=FILE.bin");
  if (flags.count("heldout")) {
    if (flags["heldout"] != "true" && flags["heldout"] != "false")
      return Usage("--heldout takes no value (or true/false)");
    if (flags["heldout"] == "true") {
      if (flags.count("tokens") || flags.count("worker") || flags.count("workers") ||
          flags.count("seed"))
        return Usage(
            "--heldout writes the worker's held-out stream as it is: no --tokens, "
            "--worker, --workers or --seed");
      data::DataOptions o;  // diloco-worker's --data=synthetic
      o.train_tokens = 0;
      auto d = data::LoadData(o, o.synthetic.vocab);
      if (!d.ok()) return Fail(d.status());
      if (auto s = data::WriteTokenFile(flags["out"], d->heldout); !s.ok()) return Fail(s);
      std::printf(
          "wrote %s: %zu tokens, the workers' synthetic held-out stream (segment s of %d tokens "
          "from chain s %% %d), entropy rate %.4f nats/token\n",
          flags["out"].c_str(), d->heldout.size(), o.synthetic.segment_length,
          o.synthetic.components, d->heldout_entropy_rate);
      return 0;
    }
  }
  int64_t tokens = 1 << 20;
  int worker = -1, workers = 1;
  uint64_t seed = 7;
  if ((flags.count("tokens") && !absl::SimpleAtoi(flags["tokens"], &tokens)) || tokens <= 0 ||
      (flags.count("worker") && !absl::SimpleAtoi(flags["worker"], &worker)) ||
      (flags.count("workers") && !absl::SimpleAtoi(flags["workers"], &workers)) || workers < 1 ||
      (flags.count("seed") && !absl::SimpleAtoi(flags["seed"], &seed)))
    return Usage("--tokens, --worker, --workers and --seed must be integers (tokens > 0)");
  const data::MarkovMixtureOptions mo = data::DataOptions{}.synthetic;  // the workers' default
  auto mix = data::MarkovMixture::Create(mo);
  if (!mix.ok()) return Fail(mix.status());
  // --worker=I: worker I's non-IID shard; otherwise every chain equally, segments drawn at
  // random (the workers' held-out stream itself is --heldout).
  const auto weights =
      worker >= 0 ? mix->ShardWeights(worker % workers, workers, 0.8) : mix->UniformWeights();
  const auto stream = mix->Generate(weights, tokens, seed);
  if (auto s = data::WriteTokenFile(flags["out"], stream.tokens); !s.ok()) return Fail(s);
  std::printf("wrote %s: %lld tokens, entropy rate %.4f nats/token (chains of %d tokens)\n",
              flags["out"].c_str(), static_cast<long long>(tokens),
              mix->MixtureEntropyRate(weights), mix->options().states);
  return 0;
}

}  // namespace diloco::ctl
