#include "worker/island/island_steps.h"

#include <algorithm>
#include <bit>

#include "common/checksum.h"

namespace diloco::island {
namespace {

// header_: [stop, lr bits, ranges (-1: the whole model), unused, offset0, n0, offset1, n1, ...]
constexpr int kStop = 0, kLr = 1, kCount = 2, kFirst = 4;
constexpr int64_t kWhole = -1;

}  // namespace

uint64_t ParamsChecksum(std::span<const float> p) { return Checksum64(p.data(), p.size_bytes()); }

std::span<float> IslandSteps::Range(uint64_t offset, uint64_t n) {
  std::span<float> r = trainer_.ParamRange(offset, n);
  const bool seen = std::any_of(noted_.begin(), noted_.end(),
                                [&](const Noted& x) { return x.offset == offset && x.n == n; });
  // The first time in a round of calls: its values before the client touches them.
  if (!seen) noted_.push_back({offset, n, ParamsChecksum(r)});
  return r;
}

absl::StatusOr<Order> IslandSteps::Exchange(const Order& mine, absl::Duration timeout) {
  std::fill(header_.begin(), header_.end(), 0);
  std::vector<std::pair<uint64_t, uint64_t>> changed;
  if (island_.rank() == 0) {
    for (const Noted& x : noted_)
      if (ParamsChecksum(trainer_.ParamRange(x.offset, x.n)) != x.checksum)
        changed.push_back({x.offset, x.n});
    noted_.clear();
    header_[kStop] = mine.stop;
    header_[kLr] = std::bit_cast<uint32_t>(mine.lr);
    if (changed.size() > size_t(kMaxRanges)) {
      header_[kCount] = kWhole;
    } else {
      header_[kCount] = int64_t(changed.size());
      for (size_t i = 0; i < changed.size(); ++i) {
        header_[kFirst + 2 * i] = int64_t(changed[i].first);
        header_[kFirst + 2 * i + 1] = int64_t(changed[i].second);
      }
    }
  }
  if (absl::Status st = island_.Broadcast(std::span<int64_t>(header_), timeout); !st.ok())
    return st;
  Order order{header_[kStop] != 0, std::bit_cast<float>(uint32_t(header_[kLr]))};
  if (header_[kCount] == kWhole) {
    if (absl::Status st = BroadcastAll(timeout); !st.ok()) return st;
    return order;
  }
  for (int64_t i = 0; i < header_[kCount]; ++i) {
    const uint64_t off = header_[kFirst + 2 * i], n = header_[kFirst + 2 * i + 1];
    if (absl::Status st = island_.Broadcast(trainer_.ParamRange(off, n), timeout); !st.ok())
      return st;
    ++ranges_moved_;
    floats_moved_ += n;
  }
  return order;
}

absl::Status IslandSteps::BroadcastAll(absl::Duration timeout) {
  noted_.clear();
  std::span<float> p = trainer_.params();
  if (absl::Status st = island_.Broadcast(p, timeout); !st.ok()) return st;
  ++ranges_moved_;
  floats_moved_ += p.size();
  return absl::OkStatus();
}

absl::Status IslandSteps::Check(int64_t step) {
  return island_.CheckSame(ParamsChecksum(trainer_.params()), step);
}

}  // namespace diloco::island
