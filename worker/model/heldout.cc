#include "worker/model/heldout.h"

#include <vector>

namespace diloco::model {

double HeldoutLoss(Gpt<float>& gpt, const data::Batcher& heldout, int batches) {
  const size_t n = size_t(heldout.batch()) * heldout.seq_len();
  std::vector<int32_t> in(n), tg(n);
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    heldout.Fixed(i, in, tg);
    sum += gpt.Forward(in.data(), tg.data());
  }
  return sum / batches;
}

double HeldoutOracleLoss(const data::DataStreams& d, const data::Batcher& heldout, int batches) {
  if (!d.mixture.has_value()) return -1;
  double sum = 0;
  for (int i = 0; i < batches; ++i)
    for (int b = 0; b < heldout.batch(); ++b)
      sum += d.mixture->OracleLoss(d.heldout_stream, heldout.FixedStart(i, b), heldout.seq_len());
  return sum / (double(batches) * heldout.batch());
}

}  // namespace diloco::model
