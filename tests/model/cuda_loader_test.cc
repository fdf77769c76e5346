// Where CUDA libraries are looked for at run time (worker/model/cuda/library_search.h): Python's
// package folders are searched, in order, and a library that is nowhere is refused with every
// path tried named. Runs without a GPU (CUDA builds only).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "worker/model/cuda/library_search.h"

namespace diloco::model::cuda {
namespace {

namespace fs = std::filesystem;

// A fake virtual environment with nvidia/<wheel>/lib, set as $VIRTUAL_ENV for the test's life.
class FakeVenv {
 public:
  explicit FakeVenv(const char* wheel) {
    char tmpl[] = "/tmp/diloco-venv.XXXXXX";
    root_ = mkdtemp(tmpl);
    lib_ = root_ / "lib/python3.11/site-packages/nvidia" / wheel / "lib";
    fs::create_directories(lib_);
    const char* old = getenv("VIRTUAL_ENV");
    if (old != nullptr) old_ = old;
    setenv("VIRTUAL_ENV", root_.c_str(), 1);
  }
  ~FakeVenv() {
    if (old_.empty()) {
      unsetenv("VIRTUAL_ENV");
    } else {
      setenv("VIRTUAL_ENV", old_.c_str(), 1);
    }
    fs::remove_all(root_);
  }
  const fs::path& lib() const { return lib_; }

 private:
  fs::path root_, lib_;
  std::string old_;
};

TEST(CudaLibrarySearch, PythonPackageFoldersAreSearchedVirtualEnvironmentFirst) {
  FakeVenv venv("cublas");
  const std::vector<std::string> folders = CudaLibraryFolders("cublas");
  const auto at = std::find(folders.begin(), folders.end(), venv.lib().string());
  ASSERT_NE(at, folders.end()) << "the virtual environment's nvidia/cublas/lib is not searched";
  // The toolkit's folders (when present) come before Python's, and the virtual environment
  // before the system's packages.
  for (auto it = at + 1; it != folders.end(); ++it)
    EXPECT_EQ(it->find("/usr/local/cuda"), std::string::npos) << *it;
  // Another wheel's folder is not listed for this one.
  for (const std::string& f : CudaLibraryFolders("nccl")) EXPECT_NE(f, venv.lib().string());
}

TEST(CudaLibrarySearch, ALibraryInAPythonPackageFolderIsLoaded) {
  FakeVenv venv("fakewheel");
  const std::string soname = "libdiloco-fake-cuda.so.1";
  fs::copy_file(DILOCO_FAKE_CUDA_LIBRARY, venv.lib() / soname);
  std::string error;
  void* lib = OpenCudaLibrary(soname, "fakewheel", &error);
  ASSERT_NE(lib, nullptr) << error;
  int (*fn)() = nullptr;
  std::string missing;
  ResolveSymbol(lib, "diloco_fake_cuda_symbol", &fn, &missing);
  ResolveSymbol(lib, "diloco_no_such_symbol", &fn, &missing);
  EXPECT_EQ(missing, "diloco_no_such_symbol");
  ResolveSymbol(lib, "diloco_fake_cuda_symbol", &fn, &missing);
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn(), 42);
}

TEST(CudaLibrarySearch, AMissingLibraryNamesEveryPathTried) {
  FakeVenv venv("nccl");
  std::string error;
  EXPECT_EQ(OpenCudaLibrary("libdiloco-absent.so.7", "nccl", &error), nullptr);
  EXPECT_NE(error.find("cannot load libdiloco-absent.so.7"), std::string::npos) << error;
  EXPECT_NE(error.find("the loader's search path"), std::string::npos) << error;
  EXPECT_NE(error.find((venv.lib() / "libdiloco-absent.so.7").string()), std::string::npos)
      << error;
  for (const std::string& folder : CudaLibraryFolders("nccl"))
    EXPECT_NE(error.find(folder + "/libdiloco-absent.so.7"), std::string::npos) << error;
}

}  // namespace
}  // namespace diloco::model::cuda
