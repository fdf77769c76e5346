#include "worker/model/heldout.h"

#include <cmath>
#include <vector>

namespace diloco::model {

double HeldoutLoss(CpuModel& model, const data::Batcher& heldout, int batches) {
  return HeldoutLossByChain(model, data::DataStreams{}, heldout, batches).loss;
}

double HeldoutOracleLoss(const data::DataStreams& d, const data::Batcher& heldout, int batches) {
  if (!d.mixture.has_value()) return -1;
  double sum = 0;
  for (int i = 0; i < batches; ++i)
    for (int b = 0; b < heldout.batch(); ++b)
      sum += d.mixture->OracleLoss(d.heldout_stream, heldout.FixedStart(i, b, batches),
                                   heldout.seq_len());
  return sum / (double(batches) * heldout.batch());
}

std::vector<ChainShare> HeldoutOracleByChain(const data::DataStreams& d,
                                             const data::Batcher& heldout, int batches) {
  if (!d.mixture.has_value()) return {};
  const data::MarkovMixture& m = *d.mixture;
  const data::MarkovStream& s = d.heldout_stream;
  std::vector<ChainShare> out(m.components());
  for (int i = 0; i < batches; ++i)
    for (int b = 0; b < heldout.batch(); ++b) {
      const int64_t start = heldout.FixedStart(i, b, batches);
      for (int t = 1; t <= heldout.seq_len(); ++t) {  // the targets: start+1 .. start+seq_len
        const int k = s.chain[start + t];
        ++out[k].tokens;
        out[k].entropy += m.RowEntropy(k, s.tokens[start + t - 1]);
      }
    }
  for (ChainShare& c : out)
    if (c.tokens > 0) c.entropy /= double(c.tokens);
  return out;
}

HeldoutLosses HeldoutLossByChain(CpuModel& model, const data::DataStreams& d,
                                 const data::Batcher& heldout, int batches) {
  const int B = heldout.batch(), T = heldout.seq_len();
  const size_t n = size_t(B) * T;
  std::vector<int32_t> in(n), tg(n);
  const bool by_chain = d.mixture.has_value();
  const int K = by_chain ? d.mixture->components() : 0;
  std::vector<double> sum(K, 0.0);
  std::vector<int64_t> count(K, 0);
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    heldout.Fixed(i, batches, in, tg);
    total += model.Forward(in.data(), tg.data());
    if (!by_chain) continue;
    const std::span<const float> losses = model.losses();  // (B, T)
    for (int b = 0; b < B; ++b) {
      const int64_t start = heldout.FixedStart(i, b, batches);
      for (int t = 0; t < T; ++t) {
        const int k = d.heldout_stream.chain[start + t + 1];
        sum[k] += losses[size_t(b) * T + t];
        ++count[k];
      }
    }
  }
  HeldoutLosses out;
  out.loss = total / batches;
  for (int k = 0; k < K; ++k) out.chain_loss.push_back(count[k] ? sum[k] / count[k] : NAN);
  return out;
}

}  // namespace diloco::model
