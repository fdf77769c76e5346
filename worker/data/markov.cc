#include "worker/data/markov.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace diloco::data {

absl::StatusOr<MarkovMixture> MarkovMixture::Create(const MarkovMixtureOptions& o) {
  if (o.vocab < 2 || o.vocab > 65536)
    return absl::InvalidArgumentError(absl::StrCat("markov: vocab ", o.vocab, " not in [2,65536]"));
  if (o.components < 1 || o.components > 255)
    return absl::InvalidArgumentError("markov: components must be in [1,255]");
  if (o.successors < 1 || o.successors > (o.states ? o.states : o.vocab))
    return absl::InvalidArgumentError("markov: successors must be in [1,vocab]");
  if (o.segment_length < 1) return absl::InvalidArgumentError("markov: segment_length < 1");
  MarkovMixture m;
  m.options_ = o;
  if (m.options_.states == 0) m.options_.states = o.vocab;
  if (m.options_.states < 2 || m.options_.states > o.vocab)
    return absl::InvalidArgumentError("markov: states must be in [2, vocab]");
  const int K = o.components, V = m.options_.states, S = o.successors;
  m.next_.resize(size_t(K) * V * S);
  m.cdf_.resize(size_t(K) * V * S);
  m.row_entropy_.resize(size_t(K) * V);
  m.stationary_.resize(size_t(K) * V);
  m.rate_.resize(K);
  std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + 17);
  std::exponential_distribution<double> expo(1.0);
  std::vector<int> perm(V), pos(V);
  for (int k = 0; k < K; ++k) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < V; ++i) pos[perm[i]] = i;
    for (int s = 0; s < V; ++s) {
      uint16_t* nx = &m.next_[(size_t(k) * V + s) * S];
      double* cdf = &m.cdf_[(size_t(k) * V + s) * S];
      nx[0] = perm[(pos[s] + 1) % V];  // the Hamiltonian cycle: irreducible
      for (int j = 1; j < S; ++j) {
        uint16_t c;
        do c = static_cast<uint16_t>(rng() % V);
        while (std::find(nx, nx + j, c) != nx + j);
        nx[j] = c;
      }
      std::vector<double> p(S);
      double sum = 0;
      for (int j = 0; j < S; ++j) sum += (p[j] = expo(rng));
      double acc = 0, h = 0;
      for (int j = 0; j < S; ++j) {
        p[j] /= sum;
        if (p[j] > 0) h -= p[j] * std::log(p[j]);
        cdf[j] = (acc += p[j]);
      }
      cdf[S - 1] = 1.0;
      m.row_entropy_[size_t(k) * V + s] = h;
    }
    // Power iteration of the lazy chain (P + I) / 2 from the uniform distribution.
    std::vector<double> pi(V, 1.0 / V), nxt(V);
    for (int it = 0; it < 100000; ++it) {
      for (int s = 0; s < V; ++s) nxt[s] = 0.5 * pi[s];
      for (int s = 0; s < V; ++s) {
        const uint16_t* nx = &m.next_[(size_t(k) * V + s) * S];
        const double* cdf = &m.cdf_[(size_t(k) * V + s) * S];
        double prev = 0;
        for (int j = 0; j < S; ++j) {
          nxt[nx[j]] += 0.5 * pi[s] * (cdf[j] - prev);
          prev = cdf[j];
        }
      }
      double diff = 0;
      for (int s = 0; s < V; ++s) diff += std::abs(nxt[s] - pi[s]);
      pi.swap(nxt);
      if (diff < 1e-14) break;
    }
    double rate = 0;
    for (int s = 0; s < V; ++s) {
      m.stationary_[size_t(k) * V + s] = pi[s];
      rate += pi[s] * m.row_entropy_[size_t(k) * V + s];
    }
    m.rate_[k] = rate;
  }
  return m;
}

double MarkovMixture::MixtureEntropyRate(std::span<const double> w) const {
  double r = 0;
  for (int k = 0; k < components(); ++k) r += w[k] * rate_[k];
  return r;
}

std::vector<double> MarkovMixture::ShardWeights(int worker, int num_workers,
                                                double own_fraction) const {
  const int K = components();
  if (K == 1) return {1.0};
  std::vector<bool> own(K, false);
  if (num_workers < K) {
    for (int k = 0; k < K; ++k) own[k] = k % num_workers == worker % num_workers;
  } else {
    own[worker % K] = true;
  }
  const int owned = static_cast<int>(std::count(own.begin(), own.end(), true));
  std::vector<double> w(K);
  for (int k = 0; k < K; ++k)
    w[k] = own[k] ? own_fraction / owned : (1.0 - own_fraction) / (K - owned);
  return w;
}

std::vector<double> MarkovMixture::UniformWeights() const {
  return std::vector<double>(components(), 1.0 / components());
}

MarkovStream MarkovMixture::Generate(std::span<const double> weights, int64_t n,
                                     uint64_t seed) const {
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 101);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  return GenerateWith(n, rng, [&](int64_t) { return pick(rng); });
}

MarkovStream MarkovMixture::GenerateRoundRobin(int64_t n, uint64_t seed) const {
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 101);
  const int K = components();
  return GenerateWith(n, rng, [K](int64_t segment) { return static_cast<int>(segment % K); });
}

MarkovStream MarkovMixture::GenerateWith(int64_t n, std::mt19937_64& rng,
                                         const std::function<int(int64_t)>& chain_of) const {
  const int V = vocab(), S = options_.successors;
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  MarkovStream out;
  out.tokens.resize(n);
  out.chain.resize(n);
  if (n == 0) return out;
  int k = chain_of(0);
  // First token from the first chain's stationary distribution.
  double r = u01(rng), acc = 0;
  int state = V - 1;
  for (int s = 0; s < V; ++s) {
    acc += stationary_[size_t(k) * V + s];
    if (r < acc) {
      state = s;
      break;
    }
  }
  out.tokens[0] = static_cast<uint16_t>(state);
  out.chain[0] = static_cast<uint8_t>(k);
  for (int64_t t = 1; t < n; ++t) {
    if (t % options_.segment_length == 0) k = chain_of(t / options_.segment_length);
    const uint16_t* nx = &next_[(size_t(k) * V + state) * S];
    const double* cdf = &cdf_[(size_t(k) * V + state) * S];
    const double x = u01(rng);
    int j = 0;
    while (j < S - 1 && x >= cdf[j]) ++j;
    state = nx[j];
    out.tokens[t] = static_cast<uint16_t>(state);
    out.chain[t] = static_cast<uint8_t>(k);
  }
  return out;
}

double MarkovMixture::OracleLoss(const MarkovStream& s, int64_t start, int len) const {
  double sum = 0;
  for (int i = 0; i < len; ++i) sum += RowEntropy(s.chain[start + i + 1], s.tokens[start + i]);
  return sum / len;
}

}  // namespace diloco::data
