// Threads that decode and merge pushes off the shard's I/O thread. Work is pinned by fragment
// (fragment id mod threads), so a fragment's pushes are merged in arrival order by one thread
// and two fragments never contend for one accumulator; the I/O thread goes back to receiving
// as soon as a push is validated and queued. A round closes only after Wait() on its fragment.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace diloco::server {

class ApplyPool {
 public:
  // threads == 0: Submit runs the job inline (deterministic tests, benchmarks of the kernel).
  explicit ApplyPool(int threads);
  ~ApplyPool();  // runs what is queued, then joins
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  void Submit(uint32_t fragment, std::function<void()> job);
  // Blocks until every job submitted for `fragment` has run.
  void Wait(uint32_t fragment);

 private:
  struct Lane {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    std::vector<uint64_t> submitted, done;  // per fragment slot on this lane, grown on demand
    bool stop = false;
    std::thread thread;
  };
  void Run(Lane& lane);
  Lane& LaneOf(uint32_t fragment) { return *lanes_[fragment % lanes_.size()]; }

  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace diloco::server
