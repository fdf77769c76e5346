// Maps rocksdb::Status to absl::Status with Abseil's retry vocabulary: a full disk is
// ResourceExhausted (retry after freeing space), corruption is DataLoss (alert, do not retry),
// a busy or timed-out call is Unavailable (retry with backoff), other I/O errors are Internal.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "rocksdb/status.h"

namespace diloco::storage {

absl::Status FromRocks(const rocksdb::Status& s, std::string_view context);

}  // namespace diloco::storage
