// Temporary directories for tests, made one way: a fresh directory under $TEST_TMPDIR (or the
// system's temp directory) with a unique mkdtemp suffix, so tests that run at once, or the
// same test run twice, never share one. TempDir removes its directory with the fixture;
// MakeTempDir leaves that to its caller (multi-process tests keep a failed test's directory).
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace diloco::testing {

// A new empty directory named `prefix` plus a unique suffix; empty (and a test failure) when
// it cannot be made. A '/' in the prefix (a parameterized test's name) becomes '_': the
// directory is made in the temp directory itself, never below a path that does not exist.
inline std::filesystem::path MakeTempDir(std::string prefix = "diloco_test_") {
  std::replace(prefix.begin(), prefix.end(), '/', '_');
  const char* base = std::getenv("TEST_TMPDIR");
  std::string name =
      ((base && *base ? std::filesystem::path(base) : std::filesystem::temp_directory_path()) /
       (prefix + "XXXXXX"))
          .string();
  if (::mkdtemp(name.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << name << ": " << std::strerror(errno);
    return {};
  }
  return name;
}

// A directory for one test, removed with everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "diloco_test_")
      : dir_(MakeTempDir(prefix)), path_(dir_.string()) {}
  ~TempDir() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& path() const { return path_; }
  // The path of `name` inside the directory (nothing is created).
  std::string Sub(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace diloco::testing
