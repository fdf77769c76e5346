// Writing a file so that a reader (or a crash) sees the old file or the whole new one, never a
// part: the bytes go to PATH.tmp, are fsync'd, renamed over PATH, and the directory is fsync'd.
// A full disk is ResourceExhausted naming the file; on any error the temporary is removed and
// PATH is left as it was.
#pragma once

#include <span>
#include <string>

#include "absl/status/status.h"

namespace diloco {

// The file's bytes are the concatenation of `pieces`, in order (no copy is made of them).
absl::Status WriteFileAtomically(const std::string& path,
                                 std::span<const std::span<const char>> pieces);

}  // namespace diloco
