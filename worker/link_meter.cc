#include "worker/link_meter.h"

#include <algorithm>

#include "common/ema.h"

namespace diloco::worker {

void LinkMeter::Add(absl::Time start, absl::Time end, uint64_t bytes) {
  if (bytes == 0) return;
  window_.push_back({std::min(start, end - kResolution), end});
  window_bytes_ += bytes;
  if (window_.size() < kWindowTransfers || window_bytes_ < kWindowBytes) return;
  std::sort(window_.begin(), window_.end(),
            [](const Transfer& a, const Transfer& b) { return a.start < b.start; });
  absl::Duration busy;
  absl::Time covered = absl::InfinitePast();  // the union's end so far
  for (const Transfer& t : window_) {
    const absl::Time from = std::max(t.start, covered);
    if (t.end > from) busy += t.end - from;
    covered = std::max(covered, t.end);
  }
  const double sample = static_cast<double>(window_bytes_) / absl::ToDoubleSeconds(busy);
  rate_ = Ema(rate_, sample, 0.5);
  ++samples_;
  window_.clear();
  window_bytes_ = 0;
}

}  // namespace diloco::worker
