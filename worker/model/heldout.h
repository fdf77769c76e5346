// Held-out evaluation shared by the trainers and the stand-alone evaluators: the mean loss over
// `batches` fixed held-out batches (Batcher::Fixed: windows spread evenly over the held-out
// stream), and for synthetic data the loss an ideal chain-aware model would get on exactly those
// tokens, in all and per chain (so a figure can be checked to cover every chain equally).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/data/batcher.h"
#include "worker/data/source.h"
#include "worker/model/cpu_model.h"

namespace diloco::model {

double HeldoutLoss(CpuModel& model, const data::Batcher& heldout, int batches);

// The predicted (target) tokens those batches hold: batches * batch * seq_len.
inline int64_t HeldoutTokens(const data::Batcher& heldout, int batches) {
  return int64_t(batches) * heldout.batch() * heldout.seq_len();
}

// -1 unless the data is synthetic.
double HeldoutOracleLoss(const data::DataStreams& d, const data::Batcher& heldout, int batches);

// Synthetic data, per chain k: how many of the held-out targets chain k produced and the mean
// row entropy at them (chain k's floor). Empty unless the data is synthetic.
struct ChainShare {
  int64_t tokens = 0;
  double entropy = 0;  // nats/token; 0 when tokens == 0
};
std::vector<ChainShare> HeldoutOracleByChain(const data::DataStreams& d,
                                             const data::Batcher& heldout, int batches);

// HeldoutLoss (the same value, computed the same way) and, for synthetic data, the model's mean
// loss on each chain's held-out targets (empty otherwise; NaN for a chain with no targets).
struct HeldoutLosses {
  double loss = 0;
  std::vector<double> chain_loss;
};
HeldoutLosses HeldoutLossByChain(CpuModel& model, const data::DataStreams& d,
                                 const data::Batcher& heldout, int batches);

}  // namespace diloco::model
