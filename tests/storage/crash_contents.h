// What crash_child writes as checkpoint `id`: sizes and values both depend on the id, so a
// checkpoint mixing two ids (torn write) or sized for another id fails the comparison.
#pragma once

#include "tests/storage/test_util.h"

namespace diloco::storage::testutil {

inline StoreOptions CrashOptions() {
  StoreOptions o;
  o.keep = 2;
  o.memtable_bytes = 1 << 20;  // flushes (and compactions) happen while the child is killed
  return o;
}

inline Contents CrashContents(uint64_t id) {
  return MakeContents(id, {0, 1, 2, 3}, 20000 + (id % 7) * 1500, static_cast<int>(id % 5));
}

}  // namespace diloco::storage::testutil
