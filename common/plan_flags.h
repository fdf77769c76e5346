// The command line shared by diloco-server, diloco-worker and diloco-ctl.
//
// The plan flags: --model, --fragments and --shards fix the manifest and its cut into fragments
// and shards (common/plan.h). Every process of a fleet, and the tools that read its stores, must
// be given the same values, so they are defined once, here, with one default and one meaning;
// one flag file can feed them all. A worker takes its shard count from --servers: its --shards,
// when given, must agree.
//
// ParseFlags: Abseil's ParseCommandLine with the project's usage-error status (2) for a command
// line it refuses. Choice: the table behind an enum flag's AbslParseFlag / AbslUnparseFlag, so a
// bad value fails at parse time with a message listing the choices.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/manifest.h"
#include "common/model_source.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(uint32_t, fragments);
ABSL_DECLARE_FLAG(uint32_t, shards);

namespace diloco {

// The plan flags, checked together.
struct PlanSpec {
  std::string model_spec;  // --model as given (storage::ExportRequest takes the text)
  // Set when --model is a model family's preset or spec (C++-trainable): the family's name and
  // its canonical config string (ModelSource).
  std::string family;
  std::string config;
  Manifest manifest;
  uint32_t num_fragments = 0;
  uint32_t num_shards = 0;
};

// --model alone (a tool that reads a model file needs no plan): any model source
// (common/model_source.h).
absl::StatusOr<ModelSource> ModelSourceFromFlags();
// --model as a model a C++ trainer runs (a tool that evaluates the model): a family's preset or
// spec; any other source is refused, naming `what` needs one.
absl::StatusOr<ModelSource> TrainableModelFromFlags(absl::string_view what = "this command");
// --model, --fragments and --shards, checked: the model spec parses, and its manifest cuts into
// --fragments non-empty fragments over --shards shards. An error names the flag and the cause.
absl::StatusOr<PlanSpec> PlanFromFlags();
// The same with the shard count `num_shards` known otherwise (a worker's --servers): --shards,
// when given on the command line, must equal it.
absl::StatusOr<PlanSpec> PlanFromFlags(uint32_t num_shards, absl::string_view source);

// Whether `flag` was set on the command line (or a --flagfile), whatever its value.
bool FlagGiven(absl::string_view flag);

// Parses argv with Abseil and returns the positional arguments (argv[0] first). A command line
// Abseil refuses (an unknown flag, a value its type or its choices reject) prints Abseil's
// "ERROR: ..." line, then `usage_on_error` when not empty, and exits with status 2; --help and
// friends print and exit as Abseil does. --help lists the flags defined in the files whose path
// ends with one of `help_files` (and the plan flags').
std::vector<char*> ParseFlags(int argc, char** argv, std::string usage_on_error,
                              std::initializer_list<absl::string_view> help_files);

// One value of an enum flag and its name on the command line.
template <typename E>
struct Choice {
  absl::string_view name;
  E value;
};

// AbslParseFlag's body for an enum flag of `choices`.
template <typename E, size_t N>
bool ParseChoice(absl::string_view text, const Choice<E> (&choices)[N], E* out,
                 std::string* error) {
  std::vector<absl::string_view> names;
  for (const Choice<E>& c : choices) {
    if (c.name == text) {
      *out = c.value;
      return true;
    }
    names.push_back(c.name);
  }
  *error = absl::StrCat("must be ", absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ",
                        names.back());
  return false;
}

// AbslUnparseFlag's body: the name of `value`.
template <typename E, size_t N>
std::string UnparseChoice(E value, const Choice<E> (&choices)[N]) {
  for (const Choice<E>& c : choices)
    if (c.value == value) return std::string(c.name);
  return "?";
}

}  // namespace diloco
