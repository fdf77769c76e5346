#include "server/checkpoint_writer.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"
#include "common/log.h"

namespace diloco::server {

CheckpointWriter::CheckpointWriter(storage::CheckpointStore* store, bool threaded, Hook hook)
    : store_(store), before_write_(std::move(hook)) {
  if (!threaded) return;
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    Logf(LogLevel::kError, "checkpoint writer: eventfd failed: %s", std::strerror(errno));
    std::abort();
  }
  thread_ = std::thread([this] { Loop(); });
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

CheckpointWriter::Result CheckpointWriter::Run(const Job& job) {
  Result r;
  r.id = job.id;
  if (before_write_) {
    r.status = before_write_();
    if (!r.status.ok()) return r;
  }
  for (const auto& f : job.fragments)
    if (!f.unchanged) r.bytes += f.params.size_bytes() + f.momentum.size_bytes();
  const absl::Time t0 = absl::Now();
  r.status = store_->Write(job.id, job.rounds, job.optimizer, job.fragments, job.dedup, job.sync);
  r.write_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  return r;
}

void CheckpointWriter::Submit(Job job) {
  busy_ = true;
  if (!thread_.joinable()) {
    result_ = Run(job);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
  }
  cv_.notify_all();
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_.has_value(); });
    if (!job_) return;  // stopping with nothing to write
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    Result r = Run(job);
    lock.lock();
    result_ = std::move(r);
    const uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
      // The counter cannot overflow at one write per job; the loop also polls on its deadline.
    }
    cv_.notify_all();
  }
}

std::optional<CheckpointWriter::Result> CheckpointWriter::TakeResult() {
  if (!busy_) return std::nullopt;
  std::optional<Result> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.swap(result_);
  }
  if (!r) return std::nullopt;
  if (wake_fd_ >= 0) {
    uint64_t n;
    while (::read(wake_fd_, &n, sizeof(n)) == sizeof(n)) {
    }
  }
  busy_ = false;
  return r;
}

void CheckpointWriter::WaitDone() {
  if (!busy_) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return result_.has_value(); });
}

std::optional<CheckpointWriter::Result> CheckpointWriter::WaitResult() {
  WaitDone();
  return TakeResult();
}

}  // namespace diloco::server
