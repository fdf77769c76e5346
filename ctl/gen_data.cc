// diloco-ctl gen-data: writes the built-in synthetic text (a mixture of sparse Markov chains
// with an exactly known entropy rate) as an llm.c .bin token file, and prints its entropy.
// --heldout writes exactly diloco-worker's default held-out stream (what `diloco-ctl eval
// --data=synthetic` and the workers evaluate windows of), so any model can be evaluated on it
// from a file.
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/plan_flags.h"
#include "ctl/commands.h"
#include "worker/data/markov.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"

ABSL_FLAG(bool, heldout, false,
          "gen-data: write exactly the workers' default held-out stream (no --tokens, --worker, "
          "--workers or --seed)");
ABSL_FLAG(int, worker, -1,
          "gen-data: write worker I's non-IID share of --workers (-1: every chain equally)");
ABSL_FLAG(int, workers, 1,
          "gen-data: workers sharing the data (with --worker); keys: learners, ids 0..N-1");
ABSL_FLAG(uint64_t, seed, 7, "gen-data: the seed of the text");

namespace diloco::ctl {

int GenData(const Args&) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Usage("gen-data needs --out=FILE.bin");
  if (absl::GetFlag(FLAGS_heldout)) {
    if (FlagGiven("tokens") || FlagGiven("worker") || FlagGiven("workers") || FlagGiven("seed"))
      return Usage(
          "--heldout writes the worker's held-out stream as it is: no --tokens, "
          "--worker, --workers or --seed");
    data::DataOptions o;  // diloco-worker's --data=synthetic
    o.train_tokens = 0;
    auto d = data::LoadData(o, o.synthetic.vocab);
    if (!d.ok()) return Fail(d.status());
    if (auto s = data::WriteTokenFile(out, d->heldout); !s.ok()) return Fail(s);
    std::printf(
        "wrote %s: %zu tokens, the workers' synthetic held-out stream (segment s of %d tokens "
        "from chain s %% %d), entropy rate %.4f nats/token\n",
        out.c_str(), d->heldout.size(), o.synthetic.segment_length, o.synthetic.components,
        d->heldout_entropy_rate);
    return 0;
  }
  const int64_t tokens = absl::GetFlag(FLAGS_tokens).value_or(int64_t{1} << 20);
  const int worker = absl::GetFlag(FLAGS_worker), workers = absl::GetFlag(FLAGS_workers);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (tokens <= 0 || workers < 1) return Usage("--tokens and --workers must be positive");
  const data::MarkovMixtureOptions mo = data::DataOptions{}.synthetic;  // the workers' default
  auto mix = data::MarkovMixture::Create(mo);
  if (!mix.ok()) return Fail(mix.status());
  // --worker=I: worker I's non-IID shard; otherwise every chain equally, segments drawn at
  // random (the workers' held-out stream itself is --heldout).
  const auto weights =
      worker >= 0 ? mix->ShardWeights(worker % workers, workers, 0.8) : mix->UniformWeights();
  const auto stream = mix->Generate(weights, tokens, seed);
  if (auto s = data::WriteTokenFile(out, stream.tokens); !s.ok()) return Fail(s);
  std::printf("wrote %s: %lld tokens, entropy rate %.4f nats/token (chains of %d tokens)\n",
              out.c_str(), static_cast<long long>(tokens), mix->MixtureEntropyRate(weights),
              mix->options().states);
  return 0;
}

}  // namespace diloco::ctl
