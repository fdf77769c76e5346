// A small tmpfs mounted for one test (a disk that can be filled on purpose). Mounting needs
// root (CAP_SYS_ADMIN); where it is refused, mounted() is false and the test should skip.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace diloco::testing {

class Tmpfs {
 public:
  // Creates `dir` and mounts a tmpfs of `size` (mount(8) syntax: "8m") on it.
  explicit Tmpfs(std::filesystem::path dir, const std::string& size = "8m") : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    const std::string options = "size=" + size;
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  // Unmounts (lazily, so a file still open elsewhere does not keep it) and removes `dir`.
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }  // why the mount failed
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace diloco::testing
