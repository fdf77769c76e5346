#include "worker/optimizer_state.h"

#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/checksum.h"

namespace diloco::worker {
namespace {

constexpr char kMagic[8] = {'D', 'L', 'A', 'D', 'A', 'M', 'W', '1'};

// Naturally aligned, no padding: its fields can be read in place.
struct Header {
  char magic[8];
  uint32_t worker_id;
  uint32_t reserved;  // 0
  uint64_t manifest_fingerprint;
  uint64_t n;
  int64_t schedule_step;
  int64_t adam_step;
};
static_assert(sizeof(Header) == 48);

std::span<const char> Bytes(const void* p, size_t n) { return {static_cast<const char*>(p), n}; }

}  // namespace

std::string OptimizerStatePath(const std::string& dir, uint32_t worker_id) {
  return absl::StrCat(dir, "/worker-", worker_id, ".adamw");
}

absl::Status WriteOptimizerState(const std::string& dir, uint32_t worker_id, int64_t step,
                                 const Trainer& trainer) {
  const std::optional<Trainer::OptimizerView> s = trainer.optimizer_state();
  if (!s) return absl::FailedPreconditionError("this trainer keeps no optimizer state on the host");
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.worker_id = worker_id;
  h.manifest_fingerprint = trainer.manifest().fingerprint();
  h.n = s->m.size();
  h.schedule_step = step;
  h.adam_step = s->step;
  const size_t bytes = s->m.size() * sizeof(float);
  // The checksum runs over the three pieces as one stream, without copying them together.
  XXH3_state_t* xx = XXH3_createState();
  XXH3_64bits_reset(xx);
  XXH3_64bits_update(xx, &h, sizeof h);
  XXH3_64bits_update(xx, s->m.data(), bytes);
  XXH3_64bits_update(xx, s->v.data(), bytes);
  const uint64_t sum = XXH3_64bits_digest(xx);
  XXH3_freeState(xx);
  const std::span<const char> pieces[] = {Bytes(&h, sizeof h), Bytes(s->m.data(), bytes),
                                          Bytes(s->v.data(), bytes), Bytes(&sum, sizeof sum)};
  return WriteFileAtomically(OptimizerStatePath(dir, worker_id), pieces);
}

absl::StatusOr<std::optional<int64_t>> RestoreOptimizerState(const std::string& dir,
                                                             uint32_t worker_id, Trainer& trainer) {
  const std::string path = OptimizerStatePath(dir, worker_id);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<int64_t>();
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto refuse = [&](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("--state_dir: ", path, ": ", why,
                     " (remove the file to resume without the optimizer's moments)"));
  };
  Header h;
  if (file.size() < sizeof h + sizeof(uint64_t)) return refuse("cut short");
  std::memcpy(&h, file.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return refuse("not an optimizer state");
  const uint64_t n = trainer.manifest().total_elements();
  if (h.n > (file.size() - sizeof h) / (2 * sizeof(float)) ||
      file.size() != sizeof h + 2 * h.n * sizeof(float) + sizeof(uint64_t))
    return refuse(absl::StrCat("cut short or too long for ", h.n, " parameters"));
  uint64_t sum;
  std::memcpy(&sum, file.data() + file.size() - sizeof sum, sizeof sum);
  if (Checksum64(file.data(), file.size() - sizeof sum) != sum) return refuse("damaged (checksum)");
  if (h.worker_id != worker_id)
    return refuse(absl::StrCat("written by worker ", h.worker_id, ", not ", worker_id));
  if (h.manifest_fingerprint != trainer.manifest().fingerprint() || h.n != n)
    return refuse(absl::StrFormat("of another model (%u parameters, manifest %x; this one: %u, %x)",
                                  h.n, h.manifest_fingerprint, n,
                                  trainer.manifest().fingerprint()));
  if (h.schedule_step < 0 || h.adam_step < 0) return refuse("a negative step");
  const float* m = reinterpret_cast<const float*>(file.data() + sizeof h);
  if (absl::Status st = trainer.RestoreOptimizer(h.adam_step, {m, n}, {m + n, n}); !st.ok())
    return refuse(std::string(st.message()));
  return std::optional<int64_t>(h.schedule_step);
}

}  // namespace diloco::worker
