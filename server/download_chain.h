// Quantized downloads (docs/protocol.md, "Quantized downloads"): a shard publishes each new
// version of a fragment as a quantized update from the previous version, and defines the
// published values as exactly what a worker holding the previous version reconstructs:
//
//   U_v = Q(theta_v - P_{v-1} + r),  P_v = P_{v-1} + deQ(U_v),  r = theta_v - P_v
//
// where theta_v is the outer step's result, P the published values (the shard's theta: what it
// checkpoints and what a whole-fragment pull sends) and r the residual the quantizer left
// (error feedback on the shard). P_{v-1} + deQ(U_v) is kernels::DecodeAccumulate with weight 1,
// which rounds the same on every CPU path and on CUDA (docs/kernels.md), so every worker that
// held P_{v-1} holds P_v to the bit; the checksum of P_v travels with each update to prove it.
//
// The chain keeps the last few updates, so a worker a few versions behind gets U_{b+1..v} (in
// order, reconstructed one after the other) instead of the whole fp32 fragment, and only while
// that is smaller. The residual is kept int4-encoded (0.5 + 4/block bytes per parameter, beside
// theta and momentum's 8: the shard's memory bound): its own quantization error is at most 1/14
// of the residual's block maximum, which is at most half a step of the update's grid, so what
// is lost per version is under 4% of a grid step, against the whole half step (growing with
// the versions) without a residual. With sparse top-k updates the residual holds most of each
// step (the entries not sent, until a later update sends them), so it is kept in fp32 (4 bytes
// per parameter): re-quantizing it every version would lose that part of the step. It is not
// checkpointed: a restarted shard starts with a zero residual and an empty chain (workers then
// get whole fragments).
//
// Keyframes (`every` > 1; docs/protocol.md, "Keyframes"): a version's update is taken from the
// last keyframe K instead of the version before it, U_v = Q(theta_v - P_K + r), P_v = P_K +
// deQ(U_v), and every `every`-th version (or one a whole fragment was sent at, or one made while
// every worker held the version before it) becomes the next keyframe. A worker that holds keyframe
// K then reaches any later version of K's span with one update, however many versions it missed,
// and one more per keyframe it crossed: the download costs about what one push does where the chain
// of every version cost one update per version. `every` = 1 makes every version a keyframe: the
// chain above, bit for bit. Costs, while workers lag: the keyframe's values (4 bytes per parameter,
// allocated at the first version built on an older keyframe), and a grid as coarse as the span's
// drift (the residual keeps what the grid loses for the next version, as above).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "kernels/codec.h"
#include "schema/transport.h"

namespace diloco::server {

// One published version's update: U_v, chunked as a payload (wire::PayloadFrames), the
// checksums of its chunk frames, and the checksum of P_v's fp32 values (XXH3-64 of their bytes in
// the fragment's order, as Checksum64 or a Hasher over them gives).
struct DownloadUpdate {
  uint64_t version = 0;
  uint64_t base = 0;      // the version whose values it is added to (version - 1 or a keyframe)
  bool keyframe = false;  // later updates are built on P_version
  std::shared_ptr<const wire::Bytes> bytes;
  std::shared_ptr<const std::vector<uint64_t>> sums;
  uint64_t values_checksum = 0;
};

class DownloadChain {
 public:
  // `codec` quantizes the updates (int8 or int4; fp32 downloads need no chain); a fragment of
  // `numel` values; a keyframe every `every` versions (1: each version is one).
  DownloadChain(kernels::Codec codec, uint64_t numel, uint32_t every = 1);

  // The outer step moved theta from `previous` (P_{v-1}, unchanged here) to `theta`: rewrites
  // `theta` to P_v and appends U_v as `version`, built on P_{v-1} or on the keyframe (the first
  // keyframe after a Reset is P_{v-1}). `caught_up`: every worker holds the newest published
  // version, so v is a keyframe whatever the count: no worker lags the others to gain from a
  // coarser grid, and a fleet in lockstep publishes exactly the values it would without
  // keyframes (and keeps no keyframe values).
  // False when theta, or theta - P_{v-1} + r, is not finite (a diverged model): theta is left as
  // stepped (published whole), the residual zeroed and the chain emptied, so workers take the
  // whole fragment. `scratch` (resized to two chunks, reused) is the caller's, so that a shard's
  // fragments share one.
  bool Quantize(uint64_t version, std::span<const float> previous, std::span<float> theta,
                std::vector<float>& scratch, bool caught_up = false);

  // The updates that take P_base to P_version, oldest first, each built on the one before (the
  // keyframes between them, then version's); empty when the chain does not hold all of them,
  // when base is not a version they build on, or when they are not smaller than the whole fp32
  // fragment (then send that).
  std::vector<const DownloadUpdate*> Between(uint64_t base, uint64_t version) const;

  // A worker was sent `version`'s values whole (`values`, P_version): with keyframes, version
  // becomes the keyframe later updates build on, so that worker's next download is an update
  // (the updates after `version` already made stay as they were built). `newest`: no version
  // after it was made (the next Quantize's `previous` is `values`: nothing is copied). Nothing
  // with `every` = 1, or for a version older than the keyframe.
  void MarkKeyframe(uint64_t version, std::span<const float> values, bool newest);

  // Forgets the updates no worker can still need: those up to `oldest_base` (every live worker
  // holds that version or a newer one), those older than `published` that are not keyframes
  // (no chain passes through them), and beyond the newest `max_updates`.
  void Trim(uint64_t oldest_base, uint64_t published, size_t max_updates);

  // theta was replaced other than by Quantize (theta(0), a recovered checkpoint): no update
  // leads to it and the residual belongs to nothing.
  void Reset();

  kernels::Codec codec() const { return codec_; }
  uint32_t every() const { return every_; }
  size_t size() const { return updates_.size(); }
  uint64_t update_bytes() const { return update_bytes_; }  // of one update
  uint64_t keyframe() const { return keyframe_; }  // the version updates build on now (every > 1)
  // Resident bytes: the residual, the kept updates and the keyframe's values.
  uint64_t bytes() const {
    return residual_.size() + updates_.size() * update_bytes_ +
           keyframe_values_.size() * sizeof(float);
  }

 private:
  kernels::Codec codec_;
  kernels::Codec residual_codec_;  // int4 with the update's block; fp32 for top-k updates
  uint64_t numel_;
  uint64_t update_bytes_;
  bool residual_zero_ = true;  // residual_ holds no values yet (all zero)
  std::vector<uint8_t> residual_;
  uint32_t every_;
  uint64_t keyframe_ = 0;  // every > 1: its version (0: none since a Reset)
  // every > 1: P_keyframe, once a version was built on it that is not the next (while workers
  // lag; a fleet in lockstep never needs it)
  std::vector<float> keyframe_values_;
  std::deque<DownloadUpdate> updates_;  // ascending versions, oldest first
  const DownloadUpdate* Find(uint64_t version) const;
};

}  // namespace diloco::server
