#include "storage/rocksdb_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace diloco::storage {

absl::Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(absl::string_view(context.data(), context.size()), ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotSupported()) return absl::UnimplementedError(msg);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return absl::UnavailableError(msg);
  if (s.IsIOError() && s.subcode() == rocksdb::Status::kSpaceLimit)
    return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace diloco::storage
