// diloco-ctl gen-data: writes the built-in synthetic text (a mixture of sparse Markov chains
// with an exactly known entropy rate) as an llm.c .bin token file, and prints its entropy.
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
  if (!ParseArgs(argc, argv, {"out", "tokens", "worker", "workers", "seed"}, &flags, &pos, &error))
    return Usage(error);
  if (flags["out"].empty()) return Usage("gen-data needs --out=FILE.bin");
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
  // --worker=I: worker I's non-IID shard; otherwise the uniform (held-out) mixture.
  const auto weights =
      worker >= 0 ? mix->ShardWeights(worker % workers, 0.8) : mix->UniformWeights();
  const auto stream = mix->Generate(weights, tokens, seed);
  if (auto s = data::WriteTokenFile(flags["out"], stream.tokens); !s.ok()) return Fail(s);
  std::printf("wrote %s: %lld tokens, entropy rate %.4f nats/token (chains of %d tokens)\n",
              flags["out"].c_str(), static_cast<long long>(tokens),
              mix->MixtureEntropyRate(weights), mix->options().states);
  return 0;
}

}  // namespace diloco::ctl
