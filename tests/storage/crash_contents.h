// What crash_child writes as checkpoint `id`: sizes and values both depend on the id, so a
// checkpoint mixing two ids (torn write) or sized for another id fails the comparison.
// Fragment 3 changes only every third checkpoint (ids 1, 4, 7, ...): the others name the file
// of the last one that wrote it (incremental checkpoints, shared files under retention).
#pragma once

#include "tests/storage/test_util.h"

namespace diloco::storage::testutil {

inline StoreOptions CrashOptions() {
  StoreOptions o;
  o.keep = 2;
  o.memtable_bytes = 1 << 20;  // flushes (and compactions) happen while the child is killed
  return o;
}

inline uint64_t CrashBase(uint64_t id) { return id - (id - 1) % 3; }

inline Contents CrashContents(uint64_t id) {
  Contents c = MakeContents(id, {0, 1, 2}, 20000 + (id % 7) * 1500, static_cast<int>(id % 5));
  const uint64_t base = CrashBase(id);
  c.fragments.push_back(MakeContents(base, {3}, 20000 + (base % 7) * 1500, 0).fragments[0]);
  return c;
}

// The views crash_child hands over: fragment 3 marked unchanged unless `id` writes it.
inline std::vector<FragmentView> CrashViews(const Contents& c) {
  std::vector<FragmentView> v = c.Views();
  if (CrashBase(c.id) != c.id) v.back() = {3, v.back().version, {}, {}, /*unchanged=*/true};
  return v;
}

}  // namespace diloco::storage::testutil
