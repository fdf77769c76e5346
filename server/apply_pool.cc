#include "server/apply_pool.h"

namespace diloco::server {

ApplyPool::ApplyPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    Lane* lane = lanes_.back().get();
    lane->thread = std::thread([this, lane] { Run(*lane); });
  }
}

ApplyPool::~ApplyPool() {
  for (auto& lane : lanes_) {
    {
      std::lock_guard<std::mutex> g(lane->mu);
      lane->stop = true;
    }
    lane->cv.notify_all();
  }
  for (auto& lane : lanes_) lane->thread.join();
}

void ApplyPool::Submit(uint32_t fragment, std::function<void()> job) {
  if (lanes_.empty()) {
    job();
    return;
  }
  Lane& lane = LaneOf(fragment);
  const size_t slot = fragment / lanes_.size();
  {
    std::lock_guard<std::mutex> g(lane.mu);
    if (lane.submitted.size() <= slot) {
      lane.submitted.resize(slot + 1, 0);
      lane.done.resize(slot + 1, 0);
    }
    ++lane.submitted[slot];
    lane.jobs.push_back([job = std::move(job), &lane, slot] {
      job();
      std::lock_guard<std::mutex> g(lane.mu);
      ++lane.done[slot];
    });
  }
  lane.cv.notify_all();
}

void ApplyPool::Wait(uint32_t fragment) {
  if (lanes_.empty()) return;
  Lane& lane = LaneOf(fragment);
  const size_t slot = fragment / lanes_.size();
  std::unique_lock<std::mutex> lk(lane.mu);
  if (lane.submitted.size() <= slot) return;
  const uint64_t target = lane.submitted[slot];
  lane.cv.wait(lk, [&] { return lane.done[slot] >= target; });
}

void ApplyPool::Run(Lane& lane) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(lane.mu);
      lane.cv.wait(lk, [&] { return lane.stop || !lane.jobs.empty(); });
      if (lane.jobs.empty()) return;  // stopping, nothing left
      job = std::move(lane.jobs.front());
      lane.jobs.pop_front();
    }
    job();
    // Its captures go now, not when the next job replaces it: a merged push's frames (a
    // fragment's encoded delta, ~1 byte per parameter) would otherwise stay held by every idle
    // lane (seen at 124M: one push per fragment held after the last round closed).
    job = nullptr;
    lane.cv.notify_all();  // wake Wait()ers
  }
}

}  // namespace diloco::server
