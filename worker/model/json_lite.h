// A small JSON parser for the safetensors header: objects, arrays, strings (with escapes),
// numbers, true/false/null. Depth and size are bounded by the caller's input; numbers keep
// their text so integers up to 2^64 stay exact.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace diloco::model::json {

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // kNumber: the literal; kString: the decoded string
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // in file order
};

absl::StatusOr<Value> Parse(absl::string_view text);

}  // namespace diloco::model::json
