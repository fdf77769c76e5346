#include "worker/resume_state.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"

namespace diloco::worker {

std::string ResumeStatePath(const std::string& dir, uint32_t worker_id) {
  return absl::StrCat(dir, "/worker-", worker_id, ".step");
}

absl::StatusOr<std::optional<int64_t>> ReadResumeStep(const std::string& dir, uint32_t worker_id) {
  const std::string path = ResumeStatePath(dir, worker_id);
  std::ifstream in(path);
  if (!in) return std::optional<int64_t>();
  std::stringstream text;
  text << in.rdbuf();
  int64_t step = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &step) || step < 0)
    return absl::DataLossError(absl::StrCat(
        "--state_dir: ", path, " does not hold a step (remove it to start from step 0)"));
  return std::optional<int64_t>(step);
}

absl::Status WriteResumeStep(const std::string& dir, uint32_t worker_id, int64_t step) {
  const std::string text = absl::StrCat(step, "\n");
  const std::span<const char> piece(text.data(), text.size());
  return WriteFileAtomically(ResumeStatePath(dir, worker_id), std::span(&piece, 1));
}

}  // namespace diloco::worker
