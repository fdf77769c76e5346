#include "worker/model/mirror_ranges.h"

#include <algorithm>
#include <iterator>

namespace diloco::model {

std::vector<ElementRange> MirrorRanges::Claim(uint64_t begin, uint64_t end) {
  std::vector<ElementRange> missing;
  if (begin >= end) return missing;
  // The first range that could overlap or touch [begin, end): the last one starting at or
  // before `begin`, if it reaches it.
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  uint64_t lo = begin, hi = end, cursor = begin;
  while (it != ranges_.end() && it->first <= end) {
    if (it->first > cursor) missing.push_back({cursor, it->first});
    cursor = std::max(cursor, it->second);
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = ranges_.erase(it);
  }
  if (cursor < end) missing.push_back({cursor, end});
  ranges_.emplace(lo, hi);
  return missing;
}

std::vector<ElementRange> MirrorRanges::TakeAll() {
  std::vector<ElementRange> all;
  all.reserve(ranges_.size());
  for (const auto& [b, e] : ranges_) all.push_back({b, e});
  ranges_.clear();
  return all;
}

}  // namespace diloco::model
