#include "worker/model/cuda/library_search.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <cstdlib>

namespace diloco::model::cuda {
namespace {

bool IsFolder(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void AddIfFolder(const std::string& path, std::vector<std::string>* out) {
  for (const std::string& seen : *out)
    if (seen == path) return;
  if (IsFolder(path)) out->push_back(path);
}

// Every match of a glob pattern, sorted (glob's order), that is a folder.
void AddMatches(const std::string& pattern, std::vector<std::string>* out) {
  glob_t g{};
  if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) AddIfFolder(g.gl_pathv[i], out);
  }
  globfree(&g);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::vector<std::string> CudaLibraryFolders(const char* wheel) {
  std::vector<std::string> out;
#ifdef DILOCO_CUDA_LIBRARY_DIR
  AddIfFolder(DILOCO_CUDA_LIBRARY_DIR, &out);
#endif
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const std::string home = Env(var);
    if (!home.empty()) AddIfFolder(home + "/lib64", &out);
  }
  for (const char* dir :
       {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/lib"})
    AddIfFolder(dir, &out);
  // Python's package folders: a virtual environment or conda first (what the user runs), then
  // the user's own, then the system's.
  const std::string lib = std::string("/nvidia/") + wheel + "/lib";
  std::vector<std::string> roots;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const std::string prefix = Env(var);
    if (!prefix.empty()) roots.push_back(prefix + "/lib/python3*/site-packages");
  }
  const std::string home = Env("HOME");
  if (!home.empty()) roots.push_back(home + "/.local/lib/python3*/site-packages");
  for (const char* r :
       {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages"})
    roots.push_back(r);
  for (const std::string& root : roots) AddMatches(root + lib, &out);
  return out;
}

void* OpenCudaLibrary(const std::string& soname, const char* wheel, std::string* error) {
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) return lib;
  std::string tried = "the loader's search path (LD_LIBRARY_PATH, ld.so.cache)";
  const char* why = dlerror();
  std::string reason = why ? why : "not found";
  for (const std::string& dir : CudaLibraryFolders(wheel)) {
    const std::string path = dir + "/" + soname;
    tried += ", " + path;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) return lib;
    why = dlerror();
    // A file that exists but does not load says more than one that is absent.
    struct stat st {};
    if (why != nullptr && stat(path.c_str(), &st) == 0) reason = why;
  }
  if (error != nullptr) {
    *error = "cannot load " + soname + ": " + reason + " (tried " + tried +
             "; add the folder that holds it to LD_LIBRARY_PATH)";
  }
  return nullptr;
}

}  // namespace diloco::model::cuda
