#include "common/version.h"

#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "common/version_commit.h"
#include "common/version_release.h"
#include "schema/wire.h"

namespace diloco {

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", kVersionRelease, " (protocol ", wire::kProtocolVersion,
                      ", commit ", kVersionCommit, ")");
}

void SetVersionFlag(absl::string_view program) {
  absl::FlagsUsageConfig config = absl::flags_internal::GetUsageConfig();
  config.version_string = [name = std::string(program)] { return VersionLine(name) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace diloco
