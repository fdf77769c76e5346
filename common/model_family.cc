#include "common/model_family.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace diloco {
namespace {

struct Registry {
  Mutex mu;
  std::vector<const ModelFamily*> families ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static auto* r = new Registry;
  return *r;
}

}  // namespace

void RegisterModelFamily(const ModelFamily* family) {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  for (const ModelFamily* f : r.families)
    if (f->name() == family->name()) {
      std::fprintf(stderr, "model family %s registered twice\n", std::string(f->name()).c_str());
      std::abort();
    }
  r.families.push_back(family);
}

const ModelFamily* FindModelFamily(absl::string_view name) {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  for (const ModelFamily* f : r.families)
    if (f->name() == name) return f;
  return nullptr;
}

std::vector<const ModelFamily*> ModelFamilies() {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  return r.families;
}

std::map<std::string, std::string> ModelFileMetadata(const std::string& model, const Manifest& m) {
  return {{"format", "pt"},
          {"diloco.model", model},
          {"diloco.model_fingerprint", absl::StrCat(absl::Hex(m.fingerprint(), absl::kZeroPad16))}};
}

}  // namespace diloco
