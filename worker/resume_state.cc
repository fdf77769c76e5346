#include "worker/resume_state.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"

namespace diloco::worker {

std::string ResumeStatePath(const std::string& dir, uint32_t worker_id) {
  return absl::StrCat(dir, "/worker-", worker_id, ".step");
}

absl::StatusOr<std::optional<ResumePoint>> ReadResumePoint(const std::string& dir,
                                                           uint32_t worker_id) {
  const std::string path = ResumeStatePath(dir, worker_id);
  std::ifstream in(path);
  if (!in) return std::optional<ResumePoint>();
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  std::vector<absl::string_view> lines = absl::StrSplit(absl::StripAsciiWhitespace(all), '\n');
  const std::vector<std::string> fields = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  ResumePoint p;
  double seconds = -1;
  const bool data_ok =
      lines.size() == 1 ||
      (lines.size() == 2 && absl::ConsumePrefix(&lines[1], "data ") && !lines[1].empty());
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &p.step) || p.step < 0 ||
      !absl::SimpleAtod(fields[1], &seconds) || !(seconds >= 0) || !data_ok)
    return absl::DataLossError(absl::StrCat("--state_dir: ", path,
                                            " does not hold \"STEP ELAPSED_SECONDS\" and an "
                                            "optional line \"data POSITION\" (remove it to "
                                            "start from step 0)"));
  p.elapsed = absl::Seconds(seconds);
  if (lines.size() == 2) p.data_position = std::string(lines[1]);
  return std::optional<ResumePoint>(p);
}

absl::Status WriteResumePoint(const std::string& dir, uint32_t worker_id, ResumePoint point) {
  std::string text = absl::StrCat(
      point.step, " ", absl::StrFormat("%.3f", absl::ToDoubleSeconds(point.elapsed)), "\n");
  if (!point.data_position.empty()) absl::StrAppend(&text, "data ", point.data_position, "\n");
  const std::span<const char> piece(text.data(), text.size());
  return WriteFileAtomically(ResumeStatePath(dir, worker_id), std::span(&piece, 1));
}

}  // namespace diloco::worker
