#include "storage/model_export.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/model_family.h"
#include "common/model_source.h"
#include "common/plan.h"
#include "common/safetensors.h"
#include "storage/checkpoint_store.h"

namespace diloco::storage {
namespace {

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

}  // namespace

absl::StatusOr<AssembledModel> AssembleModel(const ExportRequest& req) {
  absl::StatusOr<ModelSource> source = LoadModelSource(req.model_spec);
  if (!source.ok()) return source.status();
  const Manifest* const manifest = &source->manifest;
  absl::StatusOr<Plan> plan = Plan::Create(*manifest, req.num_fragments, req.num_shards);
  if (!plan.ok()) return plan.status();
  if (req.stores.empty()) return absl::InvalidArgumentError("export: no store directories given");

  std::vector<std::unique_ptr<CheckpointStore>> by_shard(req.num_shards);
  std::vector<std::string> path_of(req.num_shards);
  for (const std::string& path : req.stores) {
    absl::StatusOr<std::unique_ptr<CheckpointStore>> store = CheckpointStore::OpenForRead(path);
    if (!store.ok()) return store.status();
    const StoreIdentity id = (*store)->identity();
    if (id.plan_fingerprint != plan->fingerprint() ||
        id.model_fingerprint != manifest->fingerprint() || id.num_shards != req.num_shards ||
        id.shard >= req.num_shards)
      return absl::FailedPreconditionError(absl::StrCat(
          "export: store '", path, "' belongs to plan ", Hex(id.plan_fingerprint), " model ",
          Hex(id.model_fingerprint), " shard ", id.shard, "/", id.num_shards, "; --model=",
          req.model_spec, " --fragments=", req.num_fragments, " --shards=", req.num_shards,
          " gives plan ", Hex(plan->fingerprint()), " model ", Hex(manifest->fingerprint())));
    if (by_shard[id.shard])
      return absl::InvalidArgumentError(absl::StrCat("export: two stores for shard ", id.shard,
                                                     ": '", path_of[id.shard], "' and '", path,
                                                     "'"));
    by_shard[id.shard] = *std::move(store);
    path_of[id.shard] = path;
  }
  std::vector<uint32_t> missing;
  for (uint32_t s = 0; s < req.num_shards; ++s)
    if (!by_shard[s]) missing.push_back(s);
  if (!missing.empty())
    return absl::FailedPreconditionError(absl::StrCat("export: no store given for shard(s) ",
                                                      absl::StrJoin(missing, ", "), " of ",
                                                      req.num_shards));

  std::vector<float> flat(plan->total_elements());
  ExportSummary summary;
  summary.plan_fingerprint = plan->fingerprint();
  summary.fragment_versions.assign(plan->fragments().size(), 0);
  std::vector<bool> placed(plan->fragments().size(), false);
  std::vector<std::string> checkpoints, rounds;
  for (uint32_t s = 0; s < req.num_shards; ++s) {
    absl::StatusOr<std::optional<Checkpoint>> c = by_shard[s]->LoadLatest();
    if (!c.ok())
      return absl::Status(c.status().code(),
                          absl::StrCat("export: store '", path_of[s], "': ", c.status().message()));
    if (!c->has_value())
      return absl::FailedPreconditionError(
          absl::StrCat("export: store '", path_of[s], "' (shard ", s, ") has no checkpoint"));
    checkpoints.push_back(absl::StrCat(s, ":", (*c)->id));
    rounds.push_back(absl::StrCat(s, ":", (*c)->rounds));
    for (const FragmentState& f : (*c)->fragments) {
      if (f.id >= plan->fragments().size() || plan->fragment(f.id).shard != s ||
          plan->fragment(f.id).numel != f.params.size() || placed[f.id])
        return absl::DataLossError(absl::StrCat("export: store '", path_of[s], "' holds fragment ",
                                                f.id, " (", f.params.size(),
                                                " values) that its plan does not give shard ", s));
      plan->Scatter(plan->fragment(f.id), f.params.data(), flat.data());
      placed[f.id] = true;
      summary.fragment_versions[f.id] = f.version;
    }
    by_shard[s].reset();
  }
  std::vector<uint32_t> absent;
  for (uint32_t f = 0; f < placed.size(); ++f)
    if (!placed[f]) absent.push_back(f);
  if (!absent.empty())
    return absl::DataLossError(
        absl::StrCat("export: no checkpoint holds fragment(s) ", absl::StrJoin(absent, ", ")));

  AssembledModel m;
  // A family's model by its canonical config; any other model by --model as given.
  m.metadata =
      ModelFileMetadata(source->family.empty() ? req.model_spec : source->config, *manifest);
  m.metadata["diloco.plan_fingerprint"] = Hex(plan->fingerprint());
  m.metadata["diloco.fragments"] = absl::StrCat(req.num_fragments);
  m.metadata["diloco.shards"] = absl::StrCat(req.num_shards);
  m.metadata["diloco.fragment_versions"] = absl::StrJoin(summary.fragment_versions, ",");
  m.metadata["diloco.checkpoints"] = absl::StrJoin(checkpoints, ",");
  m.metadata["diloco.rounds"] = absl::StrJoin(rounds, ",");
  summary.tensors = manifest->tensors().size();
  summary.bytes = flat.size() * sizeof(float);
  m.manifest = std::move(source->manifest);
  m.params = std::move(flat);
  m.summary = std::move(summary);
  return m;
}

absl::StatusOr<ExportSummary> ExportModel(const ExportRequest& req) {
  absl::StatusOr<AssembledModel> m = AssembleModel(req);
  if (!m.ok()) return m.status();
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors = ManifestTensors(m->manifest, m->params);
  if (!tensors.ok()) return tensors.status();
  if (absl::Status s = WriteSafetensors(req.out, *tensors, m->metadata); !s.ok()) return s;
  return m->summary;
}

absl::StatusOr<StoreReport> DescribeStore(const std::string& path) {
  StoreOptions options;
  options.accept_rollback = true;  // shown, and counted as a problem
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::OpenForRead(path, options);
  if (!store.ok()) return store.status();
  StoreReport report;
  if (!(*store)->rollback().empty()) report.problems.push_back((*store)->rollback());
  const StoreIdentity id = (*store)->identity();
  std::string out =
      absl::StrCat("store      ", path, "\nplan       ", Hex(id.plan_fingerprint), "\nmodel      ",
                   Hex(id.model_fingerprint), "\nshard      ", id.shard, " of ", id.num_shards,
                   "\nsize       ", (*store)->ApproximateSizeBytes(), " bytes\n");
  absl::StatusOr<std::vector<uint64_t>> ids = (*store)->ListCheckpoints();
  if (!ids.ok()) return ids.status();
  absl::StrAppend(&out, "checkpoints ", ids->size(), " kept\n");
  std::optional<Checkpoint> newest;
  for (uint64_t cid : *ids) {
    absl::StatusOr<Checkpoint> c = (*store)->LoadCheckpoint(cid);
    if (!c.ok()) {
      absl::StrAppend(&out, absl::StrFormat("  id %-8d UNREADABLE: %s\n", cid,
                                            std::string(c.status().ToString())));
      report.problems.push_back(
          absl::StrCat("checkpoint ", cid, " is unreadable: ", c.status().ToString()));
      continue;
    }
    uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
    for (const FragmentState& f : c->fragments) {
      lo = std::min(lo, f.version);
      hi = std::max(hi, f.version);
      bytes += 2 * f.params.size() * sizeof(float);
    }
    if (c->fragments.empty()) lo = 0;
    absl::StrAppend(&out, absl::StrFormat("  id %-8d rounds %-8d fragments %-4d versions %d..%d"
                                          "  %d bytes (params+momentum)  lr %g momentum %g\n",
                                          c->id, c->rounds, c->fragments.size(), lo, hi, bytes,
                                          c->optimizer.outer_lr, c->optimizer.outer_momentum));
    newest = *std::move(c);
  }
  if (newest) {
    absl::StrAppend(&out, "newest checkpoint ", newest->id, ":\n  fragment  version    elements",
                    "        bytes\n");
    for (const FragmentState& f : newest->fragments)
      absl::StrAppend(&out, absl::StrFormat("  %8d  %7d  %10d  %11d\n", f.id, f.version,
                                            f.params.size(), f.params.size() * sizeof(float)));
    absl::StrAppend(&out, "  dedup entries ", newest->dedup.size(), "\n");
  }
  report.text = std::move(out);
  return report;
}

}  // namespace diloco::storage
