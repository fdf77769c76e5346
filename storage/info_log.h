// RocksDB's informational LOG for a store, written so that a full disk cannot abort us.
//
// Debian's librocksdb is built with assertions on, and its own file logger asserts when it
// appends after a failed write: with the LOG on a full disk the first ENOSPC turns into
// abort(). This logger writes the same text to <store>/LOG with plain write(2), drops lines it
// cannot write, keeps the previous run's file as LOG.old and stops at a size cap.
#pragma once

#include <memory>
#include <string>

#include "rocksdb/env.h"

namespace diloco::storage {

// Returns nullptr when the file cannot be opened (RocksDB then runs without a LOG).
std::shared_ptr<rocksdb::Logger> OpenInfoLog(const std::string& store_dir);

// Discards everything: for read-only opens, which must not rotate a live server's LOG.
std::shared_ptr<rocksdb::Logger> NullInfoLog();

}  // namespace diloco::storage
