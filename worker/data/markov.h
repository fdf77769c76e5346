// Synthetic text with an exactly known entropy rate: a mixture of K random sparse Markov chains.
//
// Each chain k has a transition matrix P_k over the vocabulary where every state has only a few
// successors with random (Dirichlet(1)) probabilities. One successor of every state follows a
// random Hamiltonian cycle, so each chain is irreducible; its stationary distribution pi_k is
// found by power iteration of the lazy chain (P + I) / 2 (same fixed point, always converges).
// The entropy rate of chain k is h_k = sum_s pi_k(s) * H(P_k(s, .)) nats per token.
//
// A stream is a sequence of segments (segment_length tokens each); each segment picks a chain by
// the stream's weights w (the held-out stream: chain s % K for segment s) and continues from the
// previous token, so every token is one transition of the chain active at that moment. A model
// that knows which chain is active can do no better than the row entropy H(P_k(x_t, .)) per
// token; its expected loss on a stream is sum_k w_k h_k (up to the short relaxation after a
// switch), and on a concrete held-out set it is exactly the mean row entropy at the evaluated
// positions (OracleLoss). A real model is not told the chain: it must infer it from the context
// (successor sets barely overlap between chains, so one or two transitions usually identify it),
// so its loss approaches this bound from above.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace diloco::data {

struct MarkovMixtureOptions {
  int vocab = 256;
  int states = 0;             // tokens the chains use: 0..states-1 (0 = vocab); smaller is easier
  int components = 4;         // K
  int successors = 4;         // non-zero entries per row
  int segment_length = 1024;  // tokens per segment (one chain each)
  uint64_t seed = 1;          // defines the chains; every worker must use the same
};

// A generated stream and, for every token, the chain that produced it.
struct MarkovStream {
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> chain;  // chain[t] produced tokens[t] (from tokens[t-1])
};

class MarkovMixture {
 public:
  static absl::StatusOr<MarkovMixture> Create(const MarkovMixtureOptions& options);

  const MarkovMixtureOptions& options() const { return options_; }
  int components() const { return options_.components; }
  // Entropy of row `state` of chain k, nats.
  double RowEntropy(int k, int state) const { return row_entropy_[k * vocab() + state]; }
  // Stationary entropy rate of chain k, nats per token.
  double EntropyRate(int k) const { return rate_[k]; }
  // sum_k w_k h_k.
  double MixtureEntropyRate(std::span<const double> weights) const;

  // Worker `worker` of `num_workers` (non-IID): own_fraction of the weight spread evenly over
  // the components it owns, the rest evenly over the others. Ownership covers every component:
  // with fewer workers than components, worker w owns every k with k % num_workers == w (3
  // workers, 4 chains: worker 0 owns chains 0 and 3), else component w % K. So a fleet's data
  // always covers the whole distribution it is evaluated on. K = 1: all on the one chain.
  std::vector<double> ShardWeights(int worker, int num_workers, double own_fraction) const;
  // The held-out mixture: every component equally.
  std::vector<double> UniformWeights() const;

  // n tokens drawn with the given component weights, deterministic in seed.
  MarkovStream Generate(std::span<const double> weights, int64_t n, uint64_t seed) const;
  // n tokens where segment s comes from chain s % K (the held-out stream): every chain gets the
  // same number of whole segments when n is a multiple of K segments (plus one token), and
  // evenly spread windows meet every chain equally (Batcher::FixedStart). Deterministic in seed.
  MarkovStream GenerateRoundRobin(int64_t n, uint64_t seed) const;

  // Mean row entropy over the targets of windows [start, start + len] of `stream`: the targets
  // are tokens start+1 .. start+len. This is the expected loss of the chain-aware ideal model.
  double OracleLoss(const MarkovStream& stream, int64_t start, int len) const;

 private:
  // The stream of n tokens where segment s comes from chain chain_of(s), called in order.
  MarkovStream GenerateWith(int64_t n, std::mt19937_64& rng,
                            const std::function<int(int64_t)>& chain_of) const;
  int vocab() const { return options_.states; }  // the chains' state count
  MarkovMixtureOptions options_;
  // [K][V][S] successors and cumulative probabilities.
  std::vector<uint16_t> next_;
  std::vector<double> cdf_;
  std::vector<double> row_entropy_;  // [K][V]
  std::vector<double> stationary_;   // [K][V]
  std::vector<double> rate_;         // [K]
};

}  // namespace diloco::data
