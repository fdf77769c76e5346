// Held-out evaluation shared by the trainers and the stand-alone evaluators: the mean loss over
// the first `batches` fixed held-out batches, and for synthetic data the loss an ideal
// chain-aware model would get on exactly those tokens.
#pragma once

#include "worker/data/batcher.h"
#include "worker/data/source.h"
#include "worker/model/gpt.h"

namespace diloco::model {

double HeldoutLoss(Gpt<float>& gpt, const data::Batcher& heldout, int batches);

// -1 unless the data is synthetic.
double HeldoutOracleLoss(const data::DataStreams& d, const data::Batcher& heldout, int batches);

}  // namespace diloco::model
