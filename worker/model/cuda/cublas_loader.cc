#include "worker/model/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace diloco::model::cuda {
namespace {

#define DILOCO_STR2(x) #x
#define DILOCO_STR(x) DILOCO_STR2(x)
constexpr char kSoname[] = "libcublas.so." DILOCO_STR(CUBLAS_VER_MAJOR);

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

struct Loaded {
  CublasApi api;
  std::string error;  // empty when api is complete
};

Loaded Load() {
  Loaded l;
  // The loader's search path first (LD_LIBRARY_PATH, ld.so.cache), then the build machine's
  // toolkit folder, then the folders toolkits install to on other machines (lib64 on most).
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  std::string tried = "the loader's search path";
  const char* dirs[] = {
#ifdef DILOCO_CUDA_LIBRARY_DIR
      DILOCO_CUDA_LIBRARY_DIR,
#endif
      "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/lib"};
  for (const char* dir : dirs) {
    if (lib != nullptr) break;
    const std::string path = std::string(dir) + "/" + kSoname;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    tried += ", " + path;
  }
  if (lib == nullptr) {
    const char* why = dlerror();
    l.error = std::string("cannot load ") + kSoname + ": " + (why ? why : "not found") +
              " (tried " + tried + "; add the CUDA toolkit's library folder to LD_LIBRARY_PATH)";
    return l;
  }
  std::string missing;
  Resolve(lib, "cublasCreate_v2", &l.api.create, &missing);
  Resolve(lib, "cublasDestroy_v2", &l.api.destroy, &missing);
  Resolve(lib, "cublasSetStream_v2", &l.api.set_stream, &missing);
  Resolve(lib, "cublasSetMathMode", &l.api.set_math_mode, &missing);
  Resolve(lib, "cublasSgemm_v2", &l.api.sgemm, &missing);
  Resolve(lib, "cublasSgemmStridedBatched", &l.api.sgemm_strided_batched, &missing);
  if (!missing.empty()) l.error = std::string(kSoname) + " lacks " + missing;
  return l;  // the library stays loaded for the process's life
}

}  // namespace

const CublasApi* LoadCublas(std::string* error) {
  static const Loaded loaded = Load();  // once, thread-safe
  if (!loaded.error.empty()) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace diloco::model::cuda
