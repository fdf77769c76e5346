#include "common/version.h"

#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "common/version_commit.h"
#include "common/version_release.h"

namespace diloco {

std::string VersionLine(absl::string_view program, uint32_t protocol) {
  return absl::StrCat(program, " ", kVersionRelease, " (protocol ", protocol, ", commit ",
                      kVersionCommit, ")");
}

void SetVersionFlag(absl::string_view program, uint32_t protocol) {
  absl::FlagsUsageConfig config = absl::flags_internal::GetUsageConfig();
  config.version_string = [name = std::string(program), protocol] {
    return VersionLine(name, protocol) + "\n";
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace diloco
