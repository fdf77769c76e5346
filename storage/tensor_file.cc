#include "storage/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"

namespace diloco::storage {
namespace {

constexpr uint64_t kMagic = 0x31524f534e45544cull;  // "LTENSOR1"

absl::Status Errno(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

struct Header {
  uint64_t magic;
  uint32_t fragment;
  uint32_t reserved;
  uint64_t checkpoint;
  uint64_t version;
  uint64_t numel;
};
static_assert(sizeof(Header) == kTensorHeaderBytes);

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

// Writes all of iov (advancing through partial writes).
bool WriteAll(int fd, struct iovec* iov, int n) {
  while (n > 0) {
    const ssize_t w = ::writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

bool ReadAll(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string TensorFileName(uint32_t fragment, uint64_t checkpoint) {
  return absl::StrFormat("%08x-%016x.tensor", fragment, checkpoint);
}

bool ParseTensorFileName(const std::string& name, uint32_t* fragment, uint64_t* checkpoint) {
  if (name.size() != 8 + 1 + 16 + 7 || name[8] != '-' || !name.ends_with(".tensor")) return false;
  unsigned long long c = 0;
  unsigned f = 0;
  char tail[8] = {};
  if (std::sscanf(name.c_str(), "%8x-%16llx%7s", &f, &c, tail) != 3) return false;
  if (TensorFileName(f, c) != name) return false;
  *fragment = f;
  *checkpoint = c;
  return true;
}

uint64_t TensorFileBytes(uint64_t numel) { return kTensorHeaderBytes + 8 * numel + 8; }

uint64_t NewestTensorFileCheckpoint(const std::string& dir) {
  uint64_t newest = 0;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(dir, ec)) {
    uint32_t fragment = 0;
    uint64_t checkpoint = 0;
    if (ParseTensorFileName(e.path().filename().string(), &fragment, &checkpoint))
      newest = std::max(newest, checkpoint);
  }
  return newest;
}

absl::Status WriteTensorFile(const std::string& dir, const TensorFileId& id,
                             std::span<const float> params, std::span<const float> momentum) {
  if (params.size() != id.numel || momentum.size() != id.numel)
    return absl::InvalidArgumentError(absl::StrCat("fragment ", id.fragment, ": ", params.size(),
                                                   " params and ", momentum.size(),
                                                   " momentum values, expected ", id.numel));
  const Header h{kMagic, id.fragment, 0, id.checkpoint, id.version, id.numel};
  Hasher hash;
  hash.Update(&h, sizeof(h));
  hash.Update(params.data(), params.size_bytes());
  hash.Update(momentum.data(), momentum.size_bytes());
  const uint64_t sum = hash.Digest();
  const std::string name = TensorFileName(id.fragment, id.checkpoint);
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Errno(errno, absl::StrCat("creating tensor file ", tmp));
  struct iovec iov[4] = {{const_cast<Header*>(&h), sizeof(h)},
                         {const_cast<float*>(params.data()), params.size_bytes()},
                         {const_cast<float*>(momentum.data()), momentum.size_bytes()},
                         {const_cast<uint64_t*>(&sum), sizeof(sum)}};
  if (!WriteAll(fd.get(), iov, 4)) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Errno(err, absl::StrCat("writing tensor file ", tmp));
  }
  if (::fdatasync(fd.get()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Errno(err, absl::StrCat("syncing tensor file ", tmp));
  }
  if (::close(fd.release()) != 0) return Errno(errno, absl::StrCat("closing tensor file ", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return Errno(errno, absl::StrCat("renaming tensor file to ", path));
  return absl::OkStatus();
}

absl::Status ReadTensorFile(const std::string& dir, const TensorFileId& id, std::span<float> params,
                            std::span<float> momentum) {
  const std::string path = dir + "/" + TensorFileName(id.fragment, id.checkpoint);
  auto loss = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id.checkpoint, ": tensor file ", path,
                                            " of fragment ", id.fragment, " ", why));
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return loss(absl::StrCat("cannot be opened: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return loss("cannot be stat'ed");
  if (static_cast<uint64_t>(st.st_size) != TensorFileBytes(id.numel))
    return loss(absl::StrCat("has ", st.st_size, " bytes, the manifest implies ",
                             TensorFileBytes(id.numel)));
  Header h;
  if (params.size() != id.numel || momentum.size() != id.numel)
    return absl::InvalidArgumentError("tensor buffers do not match the file's length");
  uint64_t sum = 0;
  if (!ReadAll(fd.get(), &h, sizeof(h)) || !ReadAll(fd.get(), params.data(), params.size_bytes()) ||
      !ReadAll(fd.get(), momentum.data(), momentum.size_bytes()) ||
      !ReadAll(fd.get(), &sum, sizeof(sum)))
    return loss("is short");
  if (h.magic != kMagic || h.fragment != id.fragment || h.checkpoint != id.checkpoint ||
      h.version != id.version || h.numel != id.numel)
    return loss(absl::StrCat("is labelled fragment ", h.fragment, " checkpoint ", h.checkpoint,
                             " version ", h.version, " numel ", h.numel, ", the manifest says ",
                             id.fragment, "/", id.checkpoint, "/", id.version, "/", id.numel));
  Hasher hash;
  hash.Update(&h, sizeof(h));
  hash.Update(params.data(), params.size_bytes());
  hash.Update(momentum.data(), momentum.size_bytes());
  if (hash.Digest() != sum) return loss("fails its checksum");
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(errno, absl::StrCat("opening directory ", dir));
  if (::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat("syncing directory ", dir));
  return absl::OkStatus();
}

}  // namespace diloco::storage
