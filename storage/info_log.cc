#include "storage/info_log.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace diloco::storage {
namespace {

constexpr off_t kMaxBytes = 32 << 20;

class InfoLog final : public rocksdb::Logger {
 public:
  InfoLog(int fd, off_t size)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), fd_(fd), size_(size) {}
  ~InfoLog() override { CloseFd(); }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0 || size_.load() > kMaxBytes) return;
    char buf[1024];
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    struct tm t;
    localtime_r(&tv.tv_sec, &t);
    int n = std::snprintf(buf, sizeof(buf), "%04d/%02d/%02d-%02d:%02d:%02d.%06ld ",
                          t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                          static_cast<long>(tv.tv_usec));
    va_list copy;
    va_copy(copy, ap);
    const int m = std::vsnprintf(buf + n, sizeof(buf) - n - 1, format, copy);
    va_end(copy);
    n = m < 0 ? n : std::min<int>(n + m, sizeof(buf) - 2);
    if (buf[n - 1] != '\n') buf[n++] = '\n';
    if (::write(fd_, buf, n) == n) size_ += n;  // a line that does not fit is dropped
  }

 protected:
  rocksdb::Status CloseImpl() override {
    CloseFd();
    return rocksdb::Status::OK();
  }

 private:
  void CloseFd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_;
  std::atomic<off_t> size_;
};

class NullLog final : public rocksdb::Logger {
 public:
  NullLog() : rocksdb::Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NullInfoLog() { return std::make_shared<NullLog>(); }

std::shared_ptr<rocksdb::Logger> OpenInfoLog(const std::string& store_dir) {
  const std::string path = store_dir + "/LOG";
  ::rename(path.c_str(), (path + ".old").c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  return std::make_shared<InfoLog>(fd, 0);
}

}  // namespace diloco::storage
