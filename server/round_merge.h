// How a round's pushes become the one delta its outer step takes (ShardOptions::merge):
//   kWeightedMean  a running weighted sum in the round's accumulator: each push is decoded and
//                  added there as it arrives (the first overwrites: no zeroing pass), and at close
//                  the sum is divided by the merged weight and scaled to the round's share;
//   kRda           each push's delta is kept whole until the round closes, where
//                  kernels::RdaMerge combines them (DES-LOC's robust direction) into the
//                  accumulator, scaled to the round's share.
// The shard decodes each push where Admit says, on the fragment's apply thread, and calls Close
// once every push of the round is merged (ApplyPool::Wait); the accumulator comes from the
// shard's buffer pool and goes back to it with the round.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "schema/transport.h"
#include "server/buffer_pool.h"

namespace diloco::server {

enum class MergeRule { kWeightedMean, kRda };

// The order a round's pushes go into its merge (ShardOptions::merge_order):
//   kArrival  each push is decoded and merged as it arrives (default): the work overlaps the
//             wait for the round's other pushes, and the close waits only for the last one. Float
//             sums depend on their order, so the same pushes arriving in another order give a
//             delta that differs in its last bits, and a lockstep fleet is not bit-reproducible;
//   kWorker   the round's pushes are held as they came (encoded) until the round closes, then
//             merged in the order of (worker id, generation, sequence number): the same pushes
//             give the same bits whatever order they arrived in. The close decodes every push
//             of the round: it takes that much longer, and the held payloads stay in memory
//             until then (they count against the worker's credit either way).
enum class MergeOrder { kArrival, kWorker };

class RoundMerge {
 public:
  // Where one push's decoded values go: `values` (numel floats), added with weight `scale`, or
  // written over when `overwrite`.
  struct Target {
    float* values = nullptr;
    float scale = 1;
    bool overwrite = false;
  };

  virtual ~RoundMerge() = default;
  // A push of weight `rel` (relative to the round's first push) joins the round; `first`: no
  // push of the round was merged yet. `acc` is the round's accumulator (null until taken).
  virtual Target Admit(float rel, bool first, std::shared_ptr<wire::Bytes>& acc,
                       BufferPool& pool) = 0;
  // The round closes: `merged` pushes of total weight `weight_sum` went in; afterwards `acc` holds
  // the merged delta scaled to `share` of a full round (nothing merged: left as it is).
  virtual void Close(double share, double weight_sum, uint32_t merged,
                     std::shared_ptr<wire::Bytes>& acc, BufferPool& pool) = 0;
};

// The rule's merge for a fragment of `numel` values.
std::unique_ptr<RoundMerge> MakeRoundMerge(MergeRule rule, uint64_t numel);

}  // namespace diloco::server
