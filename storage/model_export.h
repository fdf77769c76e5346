// What diloco-ctl does with stores: describe one shard's store, and assemble the global model
// from every shard's newest checkpoint, into memory (AssembleModel: diloco-ctl eval evaluates
// the stores without a file) or into one safetensors file (ExportModel), for any --model.
//
// Export recomputes the plan from (model spec, P, S) exactly as server and worker do, refuses
// stores written for another plan or model, duplicate or missing shards and fragments that do
// not cover the model, and places each fragment with Plan::Scatter. Tensor names and shapes are
// the manifest's (for a model family's preset, the family's own names; common/model_family.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco::storage {

struct ExportRequest {
  std::string model_spec;  // --model: any source (common/model_source.h)
  uint32_t num_fragments = 0;
  uint32_t num_shards = 0;
  std::vector<std::string> stores;  // one per shard, any order
  std::string out;                  // .safetensors path (ExportModel only)
};

struct ExportSummary {
  uint64_t plan_fingerprint = 0;
  size_t tensors = 0;
  uint64_t bytes = 0;
  std::vector<uint64_t> fragment_versions;  // by fragment id
};

// The global model held in the stores: the flat parameters in manifest order (the model
// source's manifest, what the workers train), the safetensors metadata the export writes, the
// summary.
struct AssembledModel {
  Manifest manifest;
  std::vector<float> params;
  std::map<std::string, std::string> metadata;
  ExportSummary summary;
};
absl::StatusOr<AssembledModel> AssembleModel(const ExportRequest& request);

// AssembleModel, then written to request.out.
absl::StatusOr<ExportSummary> ExportModel(const ExportRequest& request);

// A human-readable report: identity, kept checkpoints with rounds and version range, the
// newest checkpoint's fragments (version, elements, bytes), dedup entries and size on disk.
// Loads (and so verifies) every kept checkpoint. A store that lost committed checkpoints
// (CheckpointStore::Open) is described as recovered, with what was lost.
struct StoreReport {
  std::string text;
  // Unreadable kept checkpoints and lost ones, one line each (empty: the store is sound).
  std::vector<std::string> problems;
};
absl::StatusOr<StoreReport> DescribeStore(const std::string& path);

}  // namespace diloco::storage
