#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace diloco {
namespace {

absl::Status ErrnoStatus(const std::string& what) {
  const int e = errno;
  const std::string msg = absl::StrCat(what, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::Status WriteAll(int fd, std::span<const char> bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t size = bytes.size();
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(size, 1 << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("writing ", path));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 std::span<const std::span<const char>> pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("creating ", tmp));
  absl::Status s;
  for (std::span<const char> piece : pieces) {
    s = WriteAll(fd, piece, tmp);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(absl::StrCat("syncing ", tmp));
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(absl::StrCat("closing ", tmp));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoStatus(absl::StrCat("renaming ", tmp, " to ", path));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace diloco
