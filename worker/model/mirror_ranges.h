// Which element ranges of a device model's host mirror are current. A GPU trainer keeps its
// parameters on the device and a host mirror for the sync client, which reads and edits one
// fragment's pieces at a time between steps. Copying the whole model down and up again for each
// push (4 + 4 bytes per parameter through pageable memory) would cost more than the push; the
// trainer instead fetches only the ranges asked for that are not already current, and uploads
// exactly those ranges before the next step (every range handed out may have been edited).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace diloco::model {

struct ElementRange {
  uint64_t begin = 0, end = 0;  // [begin, end)
  bool operator==(const ElementRange&) const = default;
};

class MirrorRanges {
 public:
  // Marks [begin, end) current and returns the parts of it that were not (in order): the host
  // copies those from the device before handing the range out.
  std::vector<ElementRange> Claim(uint64_t begin, uint64_t end);
  // Every current range, in order, merged where they touch; forgets them all (the host uploads
  // them before a step, after which the device is ahead of the mirror again).
  std::vector<ElementRange> TakeAll();
  bool empty() const { return ranges_.empty(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end: disjoint, and none touches the next
};

}  // namespace diloco::model
